//! Observability over real sockets and real clients: `/metrics` after a known mix of
//! requests (curl over HTTP/1.1, h2c and TLS, a reverse proxy to another selvedge, a dead
//! upstream, 404s, a header timeout), parsed by Python's `prometheus_client` parsers;
//! `/readyz` during a graceful drain; JSON access log lines from hostile requests, parsed
//! by Python's `json`; the status page in headless Chromium.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{admin_addr, eventually, Srv, TempDir};
use serde_json::Value;

fn cert(dir: &Path) -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (c, k) = (dir.join("a.crt"), dir.join("a.key"));
    std::fs::write(&c, ck.cert.pem()).unwrap();
    std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
    (c.to_str().unwrap().to_string(), k.to_str().unwrap().to_string())
}

/// The `https://` listener's address.
fn tls_addr(srv: &Srv) -> SocketAddr {
    let lines = srv.stderr.lock().unwrap().clone();
    let line = lines.iter().find(|l| l.contains("https://")).expect("https listener");
    let rest = &line[line.find("https://").unwrap() + 8..];
    rest[..rest.find('/').unwrap()].parse().unwrap()
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code} %{http_version}"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

/// Parses an exposition with `prometheus_client`'s Prometheus text parser and its
/// OpenMetrics parser; returns the samples as `[name, {labels}, value]`.
fn parse_exposition(dir: &TempDir, text: &str) -> Vec<(String, serde_json::Map<String, Value>, f64)> {
    let file = dir.write("metrics.txt", text);
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
text = open(sys.argv[1]).read()
families = list(om(text))  # the strict parser must accept it too
assert families, "no families"
out = []
for f in text_string_to_metric_families(text):
    for s in f.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "the parsers refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter()
        .map(|s| (s[0].as_str().unwrap().to_string(), s[1].as_object().unwrap().clone(), s[2].as_f64().unwrap()))
        .collect()
}

fn value(samples: &[(String, serde_json::Map<String, Value>, f64)], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).and_then(Value::as_str) == Some(*v)))
        .map(|(_, _, v)| v)
        .sum()
}

#[test]
fn metrics_count_a_known_mix_exactly() {
    let dir = TempDir::new("obs-metrics");
    dir.write("site/index.html", "<h1>hello</h1>\n");
    dir.write("up/index.html", "<p>upstream</p>\n");
    let upstream = Srv::start(&["serve", dir.path().join("up").to_str().unwrap(), "--port", "0"]);
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (c, k) = cert(dir.path());
    let cfg = dir.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n\
             [[listen]]\naddress = \"127.0.0.1:0\"\ntls = {{ cert = \"{c}\", key = \"{k}\" }}\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n[timeouts]\nheader = \"1s\"\ntls_handshake = \"1s\"\n\
             [log]\naccess = \"access.log\"\nformat = \"json\"\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n\
             [[vhost.route]]\npath = \"/up\"\nproxy = {{ upstream = \"http://{}\", strip_prefix = true }}\n\
             [[vhost.route]]\npath = \"/down\"\nproxy = {{ upstream = \"http://{dead}\" }}\n",
            upstream.addr
        ),
    );
    drop(std::net::TcpListener::bind(dead)); // nothing listens there now
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let (plain, tls, admin) = (srv.addr, tls_addr(&srv), admin_addr(&srv));
    let url = |a: SocketAddr, s: &str, p: &str| format!("{s}://{a}{p}");

    // Each curl is one connection.
    for _ in 0..3 {
        assert_eq!(curl(&["--http1.1", &url(plain, "http", "/")]), "200 1.1");
    }
    for _ in 0..2 {
        assert_eq!(curl(&["--http2-prior-knowledge", &url(plain, "http", "/")]), "200 2");
    }
    for _ in 0..2 {
        assert_eq!(curl(&["-k", "--http2", &url(tls, "https", "/")]), "200 2");
    }
    assert_eq!(curl(&["-k", "--http1.1", &url(tls, "https", "/")]), "200 1.1");
    for _ in 0..2 {
        assert_eq!(curl(&["--http1.1", &url(plain, "http", "/missing.html")]), "404 1.1");
    }
    assert_eq!(curl(&["--http1.1", &url(plain, "http", "/up/index.html")]), "200 1.1");
    assert_eq!(curl(&["--http1.1", &url(plain, "http", "/down/x")]), "502 1.1");
    // A header that never ends: closed at the 1 s header timeout, no request counted.
    let mut slow = TcpStream::connect(plain).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(t.elapsed() >= Duration::from_millis(900), "closed after {:?}", t.elapsed());

    // One scrape (its own connection is the one HTTP/1.1 connection open).
    let (status, text) = get(admin, "/metrics");
    assert_eq!(status, 200);
    let m = parse_exposition(&dir, &text);
    let req = |route: &str, status: &str, protocol: &str| {
        value(
            &m,
            "selvedge_http_requests_total",
            &[("vhost", "default"), ("route", route), ("method", "GET"), ("status", status), ("protocol", protocol)],
        )
    };
    assert_eq!(req("/", "2xx", "h1"), 4.0, "3 cleartext + 1 TLS");
    assert_eq!(req("/", "2xx", "h2"), 4.0, "2 h2c + 2 TLS");
    assert_eq!(req("/", "4xx", "h1"), 2.0);
    assert_eq!(req("/up", "2xx", "h1"), 1.0);
    assert_eq!(req("/down", "5xx", "h1"), 1.0);
    assert_eq!(value(&m, "selvedge_http_requests_total", &[]), 12.0, "{text}");
    let count = |name: &str, route: &str| value(&m, name, &[("vhost", "default"), ("route", route)]);
    assert_eq!(count("selvedge_http_request_duration_seconds_count", "/"), 10.0);
    assert_eq!(count("selvedge_http_time_to_first_byte_seconds_count", "/"), 10.0);
    assert_eq!(value(&m, "selvedge_http_request_duration_seconds_bucket", &[("route", "/"), ("le", "+Inf")]), 10.0);
    assert_eq!(count("selvedge_http_request_duration_seconds_count", "/up"), 1.0);
    assert_eq!(count("selvedge_http_response_body_bytes_total", "/"), 8.0 * 15.0 + 2.0 * 14.0, "{text}");
    assert_eq!(count("selvedge_proxy_upstream_requests_total", "/up"), 1.0);
    assert_eq!(count("selvedge_proxy_upstream_errors_total", "/up"), 0.0);
    assert_eq!(count("selvedge_proxy_upstream_requests_total", "/down"), 1.0);
    assert_eq!(count("selvedge_proxy_upstream_errors_total", "/down"), 1.0);
    assert_eq!(count("selvedge_proxy_upstream_duration_seconds_count", "/down"), 1.0);
    // Connections: 3 + 2 + 2 + 1 + 2 + 1 + 1 curls, the slow one, this scrape.
    assert_eq!(value(&m, "selvedge_connections_accepted_total", &[]), 14.0, "{text}");
    assert_eq!(value(&m, "selvedge_connections_closed_total", &[("protocol", "h1")]), 9.0, "{text}");
    assert_eq!(value(&m, "selvedge_connections_closed_total", &[("protocol", "h2")]), 4.0, "{text}");
    // By reason: the curls closed theirs; the slow head was cut off by the header timeout.
    let closed = |p, r| value(&m, "selvedge_connections_closed_total", &[("protocol", p), ("reason", r)]);
    assert_eq!([closed("h1", "client"), closed("h1", "read_timeout"), closed("h2", "client")], [8.0, 1.0, 4.0]);
    assert_eq!(value(&m, "selvedge_connections_open", &[("protocol", "h1")]), 1.0);
    assert_eq!(value(&m, "selvedge_connections_open", &[("protocol", "h2")]), 0.0);
    // HTTP/2: one stream per h2 request, none open, none reset.
    assert_eq!(value(&m, "selvedge_http2_streams_total", &[]), 4.0, "{text}");
    assert_eq!(value(&m, "selvedge_http2_streams_open", &[]), 0.0, "{text}");
    assert_eq!(value(&m, "selvedge_http2_resets_sent_total", &[]), 0.0, "{text}");
    assert_eq!(value(&m, "selvedge_http2_resets_received_total", &[]), 0.0, "{text}");
    // The page was read once from disk and then from the cache.
    let lookups = value(&m, "selvedge_file_cache_hits_total", &[]) + value(&m, "selvedge_file_cache_misses_total", &[]);
    assert!(lookups >= 10.0, "{text}");
    assert!(value(&m, "selvedge_file_cache_hits_total", &[]) >= 8.0, "{text}");
    assert_eq!(value(&m, "selvedge_ready", &[]), 1.0);
    assert!(value(&m, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(value(&m, "process_open_fds", &[]) >= 5.0);
    assert_eq!(value(&m, "selvedge_config_reloads_total", &[("result", "ok")]), 0.0);
    // Upstream health: both members up (the dead one failed once; max_fails is 3), then two
    // more failures mark the dead one down.
    let up_of = |m: &[_], a: SocketAddr| value(m, "selvedge_upstream_up", &[("upstream", &format!("http://{a}"))]);
    assert_eq!((up_of(&m, upstream.addr), up_of(&m, dead)), (1.0, 1.0), "{text}");
    for _ in 0..2 {
        assert_eq!(curl(&["--http1.1", &url(plain, "http", "/down/x")]), "502 1.1");
    }
    let (_, text) = get(admin, "/metrics");
    let m2 = parse_exposition(&dir, &text);
    assert_eq!((up_of(&m2, upstream.addr), up_of(&m2, dead)), (1.0, 0.0), "{text}");

    // A reload is counted; the counters go on where they were.
    srv.signal("HUP");
    eventually(5, "the reload counted", || {
        let (_, t) = get(admin, "/metrics");
        t.contains("selvedge_config_reloads_total{result=\"ok\"} 1")
    });
    assert_eq!(curl(&["--http1.1", &url(plain, "http", "/")]), "200 1.1");
    let (_, text) = get(admin, "/metrics");
    let m = parse_exposition(&dir, &text);
    assert_eq!(req_of(&m, "/", "2xx", "h1"), 5.0);
    let goaways = |m: &[_], code| value(m, "selvedge_http2_goaways_sent_total", &[("code", code)]);
    assert_eq!(goaways(&m, "PROTOCOL_ERROR"), 0.0);

    // A stream that depends on itself: GOAWAY(PROTOCOL_ERROR), counted by its code.
    let mut h2 = TcpStream::connect(plain).unwrap();
    h2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS
    out.extend_from_slice(&[0, 0, 5, 2, 0, 0, 0, 0, 1, 0, 0, 0, 1, 15]); // PRIORITY 1 on 1
    h2.write_all(&out).unwrap();
    let _ = h2.read_to_end(&mut Vec::new());
    let (_, text) = get(admin, "/metrics");
    let m = parse_exposition(&dir, &text);
    assert_eq!(goaways(&m, "PROTOCOL_ERROR"), 1.0, "{text}");
    assert_eq!(value(&m, "selvedge_http2_streams_total", &[]), 4.0, "{text}");

    // TLS handshakes: the 3 curls above with TLS 1.3; then one with TLS 1.2 and no request
    // (Python's ssl), one that fails (plain HTTP to the TLS port), one the client closes at
    // once, and one cut off by the 1 s `tls_handshake` timeout.
    let py = format!(
        "import socket, ssl\nc = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\nc.check_hostname = False\n\
         c.verify_mode = ssl.CERT_NONE\nc.maximum_version = ssl.TLSVersion.TLSv1_2\n\
         s = c.wrap_socket(socket.create_connection(('127.0.0.1', {})))\nprint(s.version())\ns.close()\n",
        tls.port()
    );
    let out = Command::new("python3").args(["-c", &py]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "TLSv1.2", "{}", String::from_utf8_lossy(&out.stderr));
    let mut plain_to_tls = TcpStream::connect(tls).unwrap();
    plain_to_tls.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain_to_tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let _ = plain_to_tls.read_to_end(&mut Vec::new());
    drop(TcpStream::connect(tls).unwrap());
    let mut silent = TcpStream::connect(tls).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let _ = silent.read_to_end(&mut Vec::new());
    assert!(t.elapsed() >= Duration::from_millis(900), "closed after {:?}", t.elapsed());
    let tls_series = |m: &[_]| {
        let hs = |v| value(m, "selvedge_tls_handshakes_total", &[("version", v)]);
        let failed = |r| value(m, "selvedge_tls_handshake_failures_total", &[("reason", r)]);
        [hs("TLSv1.3"), hs("TLSv1.2"), failed("error"), failed("closed"), failed("timeout")]
    };
    eventually(5, "the TLS handshakes counted", || {
        let (_, text) = get(admin, "/metrics");
        tls_series(&parse_exposition(&dir, &text)) == [3.0, 1.0, 1.0, 1.0, 1.0]
    });

    // The health endpoints are not requests of the site, nor in its access log.
    assert_eq!(get(admin, "/healthz"), (200, "ok\n".into()));
    assert_eq!(get(admin, "/readyz"), (200, "ready\n".into()));
    srv.stop();
    let log = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    assert_eq!(log.lines().count(), 15, "{log}");
    assert!(!log.contains("healthz") && !log.contains("metrics"));
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let up = lines.iter().find(|l| l["path"] == "/up/index.html").unwrap();
    assert_eq!(up["upstream_addr"], upstream.addr.to_string().as_str());
    assert!(up["upstream_time_us"].as_u64().unwrap() > 0);
    assert_eq!(up["request_id"].as_str().unwrap().len(), 32);
    // The TLS version the handshake agreed (curl with OpenSSL 3: TLS 1.3), on both protocols.
    let tls: Vec<_> = lines.iter().filter(|l| !l["tls"].is_null()).map(|l| (&l["protocol"], &l["tls"])).collect();
    assert_eq!(tls.len(), 3, "{tls:?}");
    assert!(tls.iter().all(|(_, v)| *v == "TLSv1.3"), "{tls:?}");
    assert!(tls.iter().any(|(p, _)| *p == "h1") && tls.iter().any(|(p, _)| *p == "h2"), "{tls:?}");
}

/// Connections by state while they wait, then by the reason each closed: every reason the
/// engine tells apart, over both protocols, with exact counts.
#[test]
fn connections_count_by_state_and_close_reason() {
    let dir = TempDir::new("obs-conns");
    dir.write("site/index.html", "<h1>hello</h1>\n");
    // Larger than what the loopback's socket buffers take in: a client that does not read
    // it leaves the server stuck writing.
    let big = vec![b'x'; 64 << 20];
    std::fs::write(dir.path().join("site/big.bin"), &big).unwrap();
    let cfg = dir.write(
        "selvedge.toml",
        "[server]\nworkers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [timeouts]\nheader = \"1s\"\nidle = \"1s\"\nsend = \"1s\"\n\
         [http2]\nmax_control_frames = 50\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let (plain, admin) = (srv.addr, admin_addr(&srv));
    let open = |what: &str| {
        let s = TcpStream::connect(plain).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = what;
        s
    };
    // Reads until the server closes; returns what came and how long it took.
    let until_closed = |s: &mut TcpStream| {
        let t = Instant::now();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        (buf, t.elapsed())
    };
    let h2_preface = {
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS
        out
    };

    // HTTP/1.1 that ends at once: the client closes (curl), `Connection: close` (the
    // server), a head over the limit (431: limit), a malformed head (400: error).
    assert_eq!(curl(&["--http1.1", &format!("http://{plain}/")]), "200 1.1");
    let mut c = open("close");
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    assert!(until_closed(&mut c).0.starts_with(b"HTTP/1.1 200"));
    let mut c = open("431");
    c.write_all(format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000)).as_bytes()).unwrap();
    assert!(until_closed(&mut c).0.starts_with(b"HTTP/1.1 431"));
    drop(c); // its lingering close ends here
    let mut c = open("400");
    c.write_all(b"GET / HTTP/1.1\r\nHost x\r\n\r\n").unwrap();
    assert!(until_closed(&mut c).0.starts_with(b"HTTP/1.1 400"));
    drop(c);
    // HTTP/2 that ends at once: the client closes (curl), a connection error (a stream
    // that depends on itself: PROTOCOL_ERROR), a PING flood (ENHANCE_YOUR_CALM).
    assert_eq!(curl(&["--http2-prior-knowledge", &format!("http://{plain}/")]), "200 2");
    let mut c = open("h2 error");
    let mut out = h2_preface.clone();
    out.extend_from_slice(&[0, 0, 5, 2, 0, 0, 0, 0, 1, 0, 0, 0, 1, 15]); // PRIORITY 1 on 1
    c.write_all(&out).unwrap();
    until_closed(&mut c);
    drop(c);
    let mut c = open("h2 flood");
    let mut out = h2_preface.clone();
    for _ in 0..200 {
        out.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        // PING
    }
    let _ = c.write_all(&out);
    until_closed(&mut c);
    drop(c);

    // Four that wait: a head that never ends (reading), a keep-alive connection after its
    // answer and an HTTP/2 connection without streams (idle), a download the client does
    // not read (writing).
    let mut slow = open("slow head");
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let mut kept = open("keep-alive");
    kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let mut h2_idle = open("h2 idle");
    h2_idle.write_all(&h2_preface).unwrap();
    let mut stuck = open("stuck download");
    stuck.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // Scraped until the four are in their states (each scrape is one more connection the
    // server closes), well inside their 1 s timeouts.
    let waiting = Instant::now();
    let mut scrapes = 0.0;
    let (text, m) = loop {
        let (_, text) = get(admin, "/metrics");
        scrapes += 1.0;
        let m = parse_exposition(&dir, &text);
        let state = |p, s| value(&m, "selvedge_connections_state", &[("protocol", p), ("state", s)]);
        let h1 = [state("h1", "reading"), state("h1", "writing"), state("h1", "idle")];
        if (h1 == [1.0, 2.0, 1.0] && state("h2", "idle") == 1.0) || waiting.elapsed() > Duration::from_millis(600) {
            break (text, m);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let state = |p, s| value(&m, "selvedge_connections_state", &[("protocol", p), ("state", s)]);
    // The scrape's own connection is writing too.
    assert_eq!(
        [state("h1", "reading"), state("h1", "writing"), state("h1", "idle")],
        [1.0, 2.0, 1.0],
        "h1 reading, writing, idle\n{text}"
    );
    assert_eq!([state("h2", "reading"), state("h2", "writing"), state("h2", "idle")], [0.0, 0.0, 1.0], "{text}");
    assert_eq!(value(&m, "selvedge_connections_open", &[("protocol", "h1")]), 4.0, "{text}");

    // Each is cut off by its timeout (1 s, plus a tick of the timeout manager).
    for (what, c) in [("slow head", &mut slow), ("keep-alive", &mut kept), ("h2 idle", &mut h2_idle)] {
        let (_, took) = until_closed(c);
        assert!(took < Duration::from_secs(3), "{what}: closed after {took:?}");
    }
    drop(h2_idle); // the end of its lingering close (after GOAWAY)
    let mut sunk = 0;
    let t = Instant::now();
    // The stuck client reads nothing until well after the send timeout, then drains.
    std::thread::sleep(Duration::from_millis(2000));
    let mut buf = vec![0u8; 1 << 20];
    while let Ok(n) = stuck.read(&mut buf) {
        if n == 0 {
            break;
        }
        sunk += n;
    }
    assert!(sunk < big.len(), "the whole file went out ({sunk} bytes in {:?})", t.elapsed());

    let (_, text) = get(admin, "/metrics");
    let m = parse_exposition(&dir, &text);
    let closed = |p, r| value(&m, "selvedge_connections_closed_total", &[("protocol", p), ("reason", r)]);
    let reasons = ["client", "server", "idle_timeout", "read_timeout", "write_timeout", "limit", "error", "abuse"];
    let h1: Vec<f64> = reasons.iter().map(|r| closed("h1", r)).collect();
    let h2: Vec<f64> = reasons.iter().map(|r| closed("h2", r)).collect();
    // HTTP/1.1 `server`: the `Connection: close` request and the scrapes before this one.
    assert_eq!(h1, [1.0, 1.0 + scrapes, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], "h1 by {reasons:?}\n{text}");
    assert_eq!(h2, [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0], "h2 by {reasons:?}\n{text}");
    // Only this scrape is open now, writing its answer.
    assert_eq!(state("h1", "writing"), 2.0, "(the earlier scrape's figures)");
    let now = |p, s| value(&m, "selvedge_connections_state", &[("protocol", p), ("state", s)]);
    assert_eq!([now("h1", "reading"), now("h1", "writing"), now("h1", "idle")], [0.0, 1.0, 0.0], "{text}");
    srv.stop();
}

/// The request duration runs to the response's last byte: a 48 MB download taken at
/// 16 MB/s lasts seconds, over HTTP/1.1 and HTTP/2, while its head came at once.
#[test]
fn duration_runs_to_the_last_byte() {
    let dir = TempDir::new("obs-last-byte");
    std::fs::create_dir_all(dir.path().join("site")).unwrap();
    std::fs::write(dir.path().join("site/big.bin"), vec![b'x'; 48 << 20]).unwrap();
    let cfg = dir.write(
        "selvedge.toml",
        "[server]\nworkers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let admin = admin_addr(&srv);
    let url = format!("http://{}/big.bin", srv.addr);
    let mut last = (0.0, 0.0, 0.0);
    for (i, proto) in ["--http1.1", "--http2-prior-knowledge"].into_iter().enumerate() {
        let t = Instant::now();
        assert_eq!(curl(&[proto, "--limit-rate", "16M", &url]).split(' ').next(), Some("200"));
        let took = t.elapsed().as_secs_f64();
        let (_, text) = get(admin, "/metrics");
        let m = parse_exposition(&dir, &text);
        let of = |name: &str| value(&m, name, &[("route", "/")]);
        let (count, sum) =
            (of("selvedge_http_request_duration_seconds_count"), of("selvedge_http_request_duration_seconds_sum"));
        let ttfb = of("selvedge_http_time_to_first_byte_seconds_sum");
        assert_eq!(count, (i + 1) as f64, "{proto}: one duration per request\n{text}");
        let (d, f) = (sum - last.1, ttfb - last.2);
        // The sockets' buffers take the last few MB: the server is done a little before
        // the client.
        assert!(d > 1.0 && d <= took + 0.1, "{proto}: duration {d:.3} s of a {took:.3} s download\n{text}");
        assert!(f < 0.2, "{proto}: time to first byte {f:.3} s");
        last = (count, sum, ttfb);
    }
    srv.stop();
}

fn req_of(m: &[(String, serde_json::Map<String, Value>, f64)], route: &str, status: &str, protocol: &str) -> f64 {
    value(
        m,
        "selvedge_http_requests_total",
        &[("vhost", "default"), ("route", route), ("method", "GET"), ("status", status), ("protocol", protocol)],
    )
}

#[test]
fn readyz_flips_during_a_graceful_drain() {
    let dir = TempDir::new("obs-drain");
    dir.write("site/index.html", "x\n");
    // The script says it has started, then waits for the test to release it: the request
    // is in flight from before the signal until after every check of the drain, however
    // slowly a loaded machine runs the test.
    let started = dir.path().join("started");
    let release = dir.path().join("release");
    let script = dir.write(
        "cgi/slow.sh",
        format!(
            "#!/bin/sh\ntouch '{started}'\ni=0\nwhile [ ! -e '{release}' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n\
             printf 'Content-Type: text/plain\\r\\n\\r\\ndone\\n'\n",
            started = started.display(),
            release = release.display()
        ),
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cfg = dir.write(
        "selvedge.toml",
        "[[listen]]\naddress = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n\
         [[vhost.route]]\npath = \"/cgi\"\ncgi = { dir = \"cgi\", timeout = \"60s\" }\n",
    );
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let admin = admin_addr(&srv);
    assert_eq!(get(admin, "/readyz"), (200, "ready\n".into()));
    // A request in flight until the test releases it.
    let addr = srv.addr;
    let slow = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"GET /cgi/slow.sh HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    eventually(30, "the script started", || started.exists());
    let pid = srv.pid();
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    eventually(10, "readyz 503", || get(admin, "/readyz") == (503, "draining\n".into()));
    // Still alive while draining; the public listener stops taking connections (each
    // worker closes its copy once it sees the shutdown, a moment after the flip).
    assert_eq!(get(admin, "/healthz"), (200, "ok\n".into()));
    eventually(10, "the public listener closes", || TcpStream::connect(addr).is_err());
    std::fs::write(&release, "").unwrap();
    let answer = slow.join().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("done\n") && answer.ends_with("0\r\n\r\n"),
        "{answer}"
    );
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    let status = srv.stop();
    assert_eq!(status, Some(0));
    assert!(TcpStream::connect(admin).is_err(), "the admin listener outlived the process");
}

#[test]
fn json_log_lines_parse_for_hostile_requests() {
    let dir = TempDir::new("obs-json");
    dir.write("site/index.html", "x\n");
    dir.write("site/q\"uote.txt", "quoted\n");
    let cfg = dir.write(
        "selvedge.toml",
        "[[listen]]\naddress = \"127.0.0.1:0\"\n[log]\naccess = \"access.log\"\nformat = \"json\"\n\
         request_id = \"trust\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let raw = |bytes: &[u8]| {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf[..buf.len().min(12)]).into_owned()
    };
    // Quotes and backslashes in the path and query; non-UTF-8 (obs-text), quotes,
    // backslashes and a tab in the user agent and referer; a client's request id kept.
    let asked: [&[u8]; 5] = [
        b"GET /q\"uote.txt?q=\"x\"&r=\\ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /?%00%0a%22 HTTP/1.1\r\nHost: x\r\nUser-Agent: ua \"q\" \\ \xff\xfe\xc3\xa9\tend\r\nReferer: \xe2\x80\x8b\"\r\nX-Request-Id: abc-123\r\nConnection: close\r\n\r\n",
        // Refused by the engine's parser with 400 (never reach the log): raw non-UTF-8
        // and control bytes in the path, a control byte in a header.
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: a\x01b\r\nConnection: close\r\n\r\n",
        // A backslash in the path: the static route's 400, logged.
        b"GET /back\\slash HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ];
    assert_eq!(raw(asked[0]), "HTTP/1.1 200");
    assert_eq!(raw(asked[1]), "HTTP/1.1 200");
    assert_eq!(raw(asked[2]), "HTTP/1.1 400");
    assert_eq!(raw(asked[3]), "HTTP/1.1 400");
    assert_eq!(raw(asked[4]), "HTTP/1.1 400");
    srv.stop();
    // Python's json module: every line is one valid object (strict: no raw controls).
    let script = r#"
import json, sys
data = open(sys.argv[1], 'rb').read()
text = data.decode('utf-8')  # strict: the file is valid UTF-8
out = [json.loads(line, strict=True) for line in text.splitlines()]
print(json.dumps(out))
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(dir.path().join("access.log")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut lines: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lines.len(), 3, "{lines:?}");
    // Each worker thread buffers its own lines, so the file is in order per thread, not
    // across threads (requests 1 and 5 may be written before request 2 when they ran on
    // another worker): put them back in the order asked.
    let order = |l: &Value| match l["path"].as_str() {
        Some("/q\"uote.txt") => 0,
        Some("/") => 1,
        _ => 2,
    };
    lines.sort_by_key(order);
    assert_eq!(lines[0]["path"], "/q\"uote.txt");
    assert_eq!(lines[0]["query"], "q=\"x\"&r=\\");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["bytes"], 7);
    assert_eq!(lines[0]["user_agent"], Value::Null);
    assert_eq!(lines[1]["query"], "%00%0a%22");
    assert_eq!(lines[1]["user_agent"], "ua \"q\" \\ \u{ff}\u{fe}é\tend");
    assert_eq!(lines[1]["referer"], "\u{200b}\"");
    assert_eq!(lines[1]["request_id"], "abc-123");
    assert_eq!(lines[1]["protocol"], "h1");
    assert_eq!(lines[1]["vhost"], "default");
    assert_eq!(lines[1]["route"], "/");
    assert!(lines[1]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[2]["path"], "/back\\slash");
    assert_eq!(lines[2]["status"], 400);
    for l in &lines {
        for k in ["duration_us", "ttfb_us"] {
            assert!(l[k].as_u64().is_some(), "{k}: {l}");
        }
    }
}

#[test]
fn templates_render_nginx_style_fields() {
    let dir = TempDir::new("obs-template");
    dir.write("site/index.html", "x\n");
    let cfg = dir.write(
        "selvedge.toml",
        "[[listen]]\naddress = \"127.0.0.1:0\"\n[log]\naccess = \"access.log\"\n\
         format = \"$remote_addr \\\"$request\\\" $status $body_bytes_sent $request_time $upstream_time $$ ${protocol}:$http_x_custom\"\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let r = srv.get_h("/index.html?a=1", &[("X-Custom", "he said \"hi\"")]);
    assert_eq!(r.status, 200);
    srv.stop();
    let log = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let line = log.lines().next().unwrap();
    let (head, tail) = line.split_once(" - $ ").unwrap();
    assert!(head.starts_with("127.0.0.1 \"GET /index.html?a=1 HTTP/1.1\" 200 2 0.0"), "{line}");
    assert_eq!(tail, "h1:he said \\\"hi\\\"", "{line}");
    // An unknown field is refused where it is written.
    let bad = dir.write(
        "bad.toml",
        "[log]\nformat = \"$remote_addr $nope\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let out = Command::new(common::BIN).args(["check", "-c", bad.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad.toml:2:10") && err.contains("unknown field $nope"), "{err}");
}

#[test]
fn the_admin_listener_refuses_a_public_address_unless_told() {
    let dir = TempDir::new("obs-public");
    dir.write("site/index.html", "x\n");
    let body = "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n";
    let check = |admin: &str| {
        let f = dir.write("c.toml", format!("[admin]\n{admin}\n{body}"));
        let out = Command::new(common::BIN).args(["check", "-c", f.to_str().unwrap()]).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = check("listen = \"0.0.0.0:9900\"");
    assert!(!ok && err.contains("c.toml:2:10") && err.contains("not a loopback address"), "{err}");
    let (ok, err) = check("listen = \"[::]:9900\"");
    assert!(!ok && err.contains("public = true"), "{err}");
    assert!(check("listen = \"0.0.0.0:9900\"\npublic = true").0);
    assert!(check("listen = \"127.0.0.1:9900\"").0);
    assert!(check("listen = \"[::1]:9900\"").0);
    assert!(check("listen = \"unix:admin.sock\"").0);
}

#[test]
fn status_page_draws_its_charts_in_headless_chromium() {
    let Some(chromium) =
        ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok())
    else {
        panic!("chromium is not installed (.ci/run installs it)");
    };
    let dir = TempDir::new("obs-status");
    dir.write("site/index.html", "<h1>hello</h1>\n");
    let cfg = dir.write(
        "selvedge.toml",
        "[[listen]]\naddress = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let admin = admin_addr(&srv);
    // Traffic for three seconds of history (the sampler takes one point a second).
    let addr = srv.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut s = TcpStream::connect(addr).unwrap();
                for i in 0..20 {
                    let last = if i == 19 { "Connection: close\r\n" } else { "" };
                    write!(s, "GET /{} HTTP/1.1\r\nHost: x\r\n{last}\r\n", if i % 5 == 0 { "nope" } else { "" })
                        .unwrap();
                }
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(3500));
    let url = format!("http://{admin}/status");
    let profile = dir.path().join("profile");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let flags = |extra: &[String]| {
        let mut args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            "--virtual-time-budget=3000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.extend(extra.iter().cloned());
        args.push(url.clone());
        args
    };
    let out = Command::new(chromium).args(flags(&[format!("--screenshot={}", shot.display())])).output().unwrap();
    assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let dom = Command::new(chromium).args(flags(&["--dump-dom".into()])).output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    for chart in ["rps", "latency", "conns", "cache"] {
        let at = dom.find(&format!("id=\"{chart}\"")).unwrap_or_else(|| panic!("no {chart} canvas: {dom}"));
        let tag = &dom[dom[..at].rfind('<').unwrap()..at + dom[at..].find('>').unwrap()];
        let points: usize = tag
            .split("data-points=\"")
            .nth(1)
            .and_then(|s| s[..s.find('"').unwrap()].parse().ok())
            .unwrap_or_else(|| panic!("{chart} was not drawn: {tag}"));
        assert!(points >= 2, "{chart} has {points} points: {tag}");
    }
    assert!(dom.contains(">ready<"), "state not shown");
    assert!(dom.contains("<td>default</td><td>/</td>"), "routes table: {dom}");
    eprintln!("screenshot: {}", shot.display());
    srv.stop();
}
