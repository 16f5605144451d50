//! Upstream pools with real processes: the `selvedge` binary as the proxy in front of several
//! `selvedge serve DIR` upstreams on their own loopback ports, each answering its own name
//! (the file `id`), and of `pool_upstream.py` (slow, health status, dropped requests).
//! Balancing per policy, least connections against a slow upstream, consistent hashing
//! across a reload, an upstream killed under `wrk` load, active checks, DNS re-resolution
//! through a DNS server the test runs, retries that never repeat a POST, the PROXY
//! protocol, and client addresses from trusted proxies only.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, free_port, have, Srv, TempDir};

const PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pool_upstream.py");

/// `selvedge serve` of a directory whose `id` file holds `name`.
fn serve(name: &str, host: &str, port: u16) -> (TempDir, Srv) {
    let d = TempDir::new(name);
    d.write("id", name);
    let srv = Srv::start(&[
        "serve",
        d.path().to_str().unwrap(),
        "--host",
        host,
        "--port",
        &port.to_string(),
        "--workers",
        "1",
    ]);
    (d, srv)
}

/// `pool_upstream.py`: answers `name` after `delay` seconds; `/health` from a file.
struct Py {
    child: Child,
    port: u16,
    name: String,
    state: PathBuf,
}

impl Py {
    fn start(d: &TempDir, name: &str, delay: f64) -> Py {
        let mut child = Command::new("python3")
            .args([PY, name, &delay.to_string(), d.path().to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("upstream did not start: {line:?}"));
        Py { child, port, name: name.into(), state: d.path().to_path_buf() }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set_health(&self, status: u16) {
        std::fs::write(self.state.join(format!("{}.health", self.name)), status.to_string()).unwrap();
    }

    /// The request lines it received.
    fn requests(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.state.join(format!("{}.log", self.name))).unwrap_or_default();
        log.lines().map(str::to_string).collect()
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn url(s: &Srv) -> String {
    format!("http://{}", s.addr)
}

/// The proxy: two workers, `server` lines in `[server]`, these routes on the default host.
fn proxy(d: &TempDir, server: &str, listen: &str, routes: &str) -> Srv {
    let cfg = d.write(
        "proxy.toml",
        format!("[server]\nworkers = 2\n{server}\n[[listen]]\nport = 0\n{listen}\n[[vhost]]\n{routes}"),
    );
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

/// A proxy route at `path` (the prefix stripped) with these keys.
fn route(path: &str, keys: &str) -> String {
    format!("[[vhost.route]]\npath = \"{path}\"\n[vhost.route.proxy]\nstrip_prefix = true\n{keys}\n")
}

fn list(urls: &[String]) -> String {
    let quoted: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A keep-alive HTTP/1.1 client.
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn new(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Client { s, buf: Vec::new() }
    }

    /// Sends a request and reads its response: status and body.
    fn send(&mut self, method: &str, path: &str, fields: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut r = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
        for (n, v) in fields {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            r.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        r.push_str("\r\n");
        r.push_str(body);
        self.s.write_all(r.as_bytes()).unwrap();
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill();
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no content-length: {head}"));
        while self.buf.len() < end + len {
            self.fill();
        }
        let body = String::from_utf8_lossy(&self.buf[end..end + len]).into_owned();
        self.buf.drain(..end + len);
        (status, body)
    }

    fn get(&mut self, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
        self.send("GET", path, fields, "")
    }

    fn fill(&mut self) {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        self.buf.extend_from_slice(&chunk[..n]);
    }
}

/// `n` requests over `conns` parallel keep-alive connections; request `i` is `GET path`
/// with the fields `fields(i)`. The answers, by request number.
fn hammer(
    addr: SocketAddr,
    conns: usize,
    n: usize,
    path: &str,
    fields: fn(usize) -> Vec<(String, String)>,
) -> Vec<String> {
    let out = Arc::new(Mutex::new(vec![String::new(); n]));
    let threads: Vec<_> = (0..conns)
        .map(|c| {
            let (out, path) = (out.clone(), path.to_string());
            std::thread::spawn(move || {
                let mut cl = Client::new(addr);
                for i in (c..n).step_by(conns) {
                    let f = fields(i);
                    let refs: Vec<(&str, &str)> = f.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                    let (status, body) = cl.get(&path, &refs);
                    assert_eq!(status, 200, "request {i}: {body}");
                    out.lock().unwrap()[i] = body;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(out).unwrap().into_inner().unwrap()
}

fn counts(answers: &[String]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for a in answers {
        *m.entry(a.clone()).or_insert(0) += 1;
    }
    m
}

/// Each name's share is within 5 points of its weight's.
fn assert_shares(what: &str, got: &HashMap<String, usize>, weights: &[(&str, u32)]) {
    let total: usize = got.values().sum();
    let wsum: u32 = weights.iter().map(|w| w.1).sum();
    for (name, w) in weights {
        let share = *got.get(*name).unwrap_or(&0) as f64 / total as f64;
        let want = f64::from(*w) / f64::from(wsum);
        assert!((share - want).abs() <= 0.05, "{what}: {name} got {share:.3}, weight says {want:.3} ({got:?})");
        println!("{what}: {name} {share:.4} (weight {want:.4})");
    }
}

fn no_fields(_: usize) -> Vec<(String, String)> {
    Vec::new()
}

fn user_field(i: usize) -> Vec<(String, String)> {
    vec![("X-User".into(), format!("user-{i}"))]
}

#[test]
fn distribution_per_policy_follows_the_weights() {
    let ups: Vec<(TempDir, Srv)> = ["a", "b", "c"].iter().map(|n| serve(n, "127.0.0.1", 0)).collect();
    let upstreams = format!(
        "upstreams = [{:?}, {{ url = {:?}, weight = 3 }}, {{ url = {:?}, weight = 2 }}]",
        url(&ups[0].1),
        url(&ups[1].1),
        url(&ups[2].1)
    );
    let d = TempDir::new("dist");
    let mut routes = String::new();
    for (p, policy) in [("/rr", "round_robin"), ("/lc", "least_conn"), ("/r2", "random_two"), ("/hash", "hash")] {
        routes.push_str(&route(p, &format!("{upstreams}\nbalance = \"{policy}\"\nhash_key = \"header:X-User\"")));
    }
    let px = proxy(&d, "", "", &routes);
    let weights = [("a", 1), ("b", 3), ("c", 2)];
    let got = counts(&hammer(px.addr, 4, 10_000, "/rr/id", no_fields));
    assert_shares("rr", &got, &weights);
    // least_conn and random_two move away from whichever member has requests in flight,
    // so when one upstream process carries three times the load of another on a busy
    // machine their shares drift from the weights (as they should: see the slow upstream
    // below; balance.rs's unit tests hold least_conn to the exact weights when members
    // are equally fast). One connection: the weighting alone.
    for policy in ["lc", "r2"] {
        let got = counts(&hammer(px.addr, 1, 10_000, &format!("/{policy}/id"), no_fields));
        assert_shares(policy, &got, &weights);
    }
    let got = counts(&hammer(px.addr, 4, 10_000, "/hash/id", user_field));
    assert_shares("hash", &got, &weights);
}

#[test]
fn least_conn_sends_little_to_a_slow_upstream() {
    let d = TempDir::new("slow");
    let fast: Vec<(TempDir, Srv)> = ["fast1", "fast2"].iter().map(|n| serve(n, "127.0.0.1", 0)).collect();
    let slow = Py::start(&d, "slow", 0.25);
    let urls = vec![url(&fast[0].1), url(&fast[1].1), slow.url()];
    let routes = route("/lc", &format!("upstreams = {}\nbalance = \"least_conn\"", list(&urls)))
        + &route("/r2", &format!("upstreams = {}\nbalance = \"random_two\"", list(&urls)))
        + &route("/rr", &format!("upstreams = {}\nbalance = \"round_robin\"", list(&urls)));
    let px = proxy(&d, "", "", &routes);
    let lc = counts(&hammer(px.addr, 12, 600, "/lc/id", no_fields));
    let r2 = counts(&hammer(px.addr, 12, 600, "/r2/id", no_fields));
    let rr = counts(&hammer(px.addr, 12, 150, "/rr/id", no_fields));
    let slow_lc = *lc.get("slow").unwrap_or(&0) as f64 / 600.0;
    let slow_r2 = *r2.get("slow").unwrap_or(&0) as f64 / 600.0;
    let slow_rr = *rr.get("slow").unwrap_or(&0) as f64 / 150.0;
    println!(
        "least_conn: {lc:?} (slow {slow_lc:.3}); random_two: {r2:?} (slow {slow_r2:.3}); round_robin: {rr:?} (slow {slow_rr:.3})"
    );
    assert!((slow_rr - 1.0 / 3.0).abs() < 0.05, "round robin gives the slow one its third: {rr:?}");
    assert!(slow_lc < 0.10, "least_conn keeps the slow upstream under 10%: {lc:?}");
    assert!(slow_r2 < 0.25, "random_two gives the slow upstream less than its third: {r2:?}");
}

#[test]
fn consistent_hash_moves_only_the_removed_upstreams_keys() {
    let ups: Vec<(TempDir, Srv)> = ["h0", "h1", "h2", "h3"].iter().map(|n| serve(n, "127.0.0.1", 0)).collect();
    let urls: Vec<String> = ups.iter().map(|u| url(&u.1)).collect();
    let d = TempDir::new("hash");
    let keys = "balance = \"hash\"\nhash_key = \"header:X-User\"";
    let px = proxy(&d, "", "", &route("/", &format!("upstreams = {}\n{keys}", list(&urls))));
    let before = hammer(px.addr, 4, 10_000, "/id", user_field);
    // Remove h2 and reload.
    let kept = [urls[0].clone(), urls[1].clone(), urls[3].clone()];
    let cfg = format!(
        "[server]\nworkers = 2\n[[listen]]\nport = 0\n[[vhost]]\n{}",
        route("/", &format!("upstreams = {}\n{keys}", list(&kept)))
    );
    std::fs::write(d.path().join("proxy.toml"), cfg).unwrap();
    px.signal("HUP");
    eventually(10, "the reload", || px.said("reloaded configuration"));
    let after = hammer(px.addr, 4, 10_000, "/id", user_field);
    let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    let on_removed = before.iter().filter(|a| *a == "h2").count();
    let others_moved = before.iter().zip(&after).filter(|(a, b)| *a != "h2" && a != b).count();
    println!("moved {moved} of 10000 keys; {on_removed} were on the removed upstream; {others_moved} others moved");
    assert!(after.iter().all(|a| a != "h2"));
    assert!(moved as f64 <= 10_000.0 * (0.25 + 0.05), "moved {moved}");
    assert!(others_moved as f64 <= 10_000.0 * 0.05, "others moved: {others_moved}");
}

#[test]
fn killed_upstream_under_load_fails_no_request() {
    if !have("wrk") {
        common::missing_tool("wrk", "killed_upstream_under_load_fails_no_request");
        return;
    }
    let (_da, a) = serve("a", "127.0.0.1", 0);
    // b restarts on its port later: one no outgoing connection can take meanwhile.
    let (db, b) = serve("b", "127.0.0.1", free_port());
    let (_dc, c) = serve("c", "127.0.0.1", 0);
    let b_port = b.addr.port();
    let d = TempDir::new("kill");
    let urls = vec![url(&a), url(&b), url(&c)];
    let keys = format!("upstreams = {}\nmax_fails = 3\nfail_timeout = \"2s\"\nretries = 2", list(&urls));
    let px = proxy(&d, "", "", &route("/", &keys));
    let wrk = Command::new("wrk")
        // A slow answer on a loaded machine is not a failed request (wrk's default timeout,
        // 2 s, would count it as one); one stuck on the killed upstream still is: 5 s fits
        // in the 5.5 s the load runs after the kill.
        .args(["-t2", "-c16", "-d7s", "--timeout", "5s", &format!("http://{}/id", px.addr)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut b = b;
    let _ = b.child.kill();
    let _ = b.child.wait();
    let killed = Instant::now();
    eventually(5, "b marked down", || px.said(&format!("127.0.0.1:{b_port} marked down")));
    println!("marked down {:?} after the kill", killed.elapsed());
    std::thread::sleep(Duration::from_millis(1500));
    // b comes back on its port.
    let back = Srv::start(&[
        "serve",
        db.path().to_str().unwrap(),
        "--host",
        "127.0.0.1",
        "--port",
        &b_port.to_string(),
        "--workers",
        "1",
    ]);
    let returned = Instant::now();
    let out = wrk.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{report}");
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("Socket errors") && !report.contains("Non-2xx"), "failed requests:\n{report}");
    // Re-admitted: the log says so, and b answers again.
    // (Requests go on meanwhile: a request is what tries b again.)
    eventually(10, "b re-admitted", || {
        hammer(px.addr, 1, 5, "/id", no_fields);
        px.said(&format!("127.0.0.1:{b_port} re-admitted"))
    });
    println!("re-admitted {:?} after it returned", returned.elapsed());
    let got = counts(&hammer(px.addr, 2, 300, "/id", no_fields));
    assert!(got.get("b").is_some_and(|&n| n > 50), "{got:?}");
    let lines = px.stderr.lock().unwrap().clone();
    let downs = lines.iter().filter(|l| l.contains("marked down")).count();
    assert!(downs >= 1, "{lines:#?}");
    drop(back);
}

#[test]
fn active_checks_take_out_an_upstream_answering_500() {
    let d = TempDir::new("active");
    let (_da, a) = serve("a", "127.0.0.1", 0);
    let b = Py::start(&d, "b", 0.0);
    b.set_health(500);
    let keys = format!(
        "upstreams = [{:?}, {:?}]\nhealth = {{ path = \"/health\", interval = \"100ms\", timeout = \"1s\", healthy = 2, unhealthy = 2 }}",
        url(&a),
        b.url()
    );
    let px = proxy(&d, "", "", &route("/", &keys));
    eventually(5, "b out", || px.said("failed its health checks: GET /health answered 500"));
    let got = counts(&hammer(px.addr, 2, 200, "/id", no_fields));
    assert_eq!(got.get("a"), Some(&200), "{got:?}");
    b.set_health(200);
    eventually(5, "b back", || px.said("is healthy again: GET /health answered 200"));
    let got = counts(&hammer(px.addr, 2, 200, "/id", no_fields));
    assert!(got.get("b").is_some_and(|&n| n >= 80), "{got:?}");
    // The checks asked for /health, with the upstream as Host.
    assert!(b.requests().iter().filter(|l| *l == "GET /health").count() >= 4);
}

/// A DNS server for one name: A records from `addrs`, nothing else (AAAA: none).
fn dns_stub(addrs: Arc<Mutex<Vec<[u8; 4]>>>) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let at = sock.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf) else { return };
            let q = &buf[..n];
            if n < 17 {
                continue;
            }
            let qtype = u16::from_be_bytes([q[n - 4], q[n - 3]]);
            let recs: Vec<[u8; 4]> = if qtype == 1 { addrs.lock().unwrap().clone() } else { Vec::new() };
            let mut m = q.to_vec();
            m[2] = 0x81;
            m[3] = 0x80;
            m[6..8].copy_from_slice(&(recs.len() as u16).to_be_bytes());
            for r in recs {
                m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
                m.extend_from_slice(&r);
            }
            let _ = sock.send_to(&m, from);
        }
    });
    at
}

#[test]
fn dns_changes_are_followed_without_a_reload() {
    let (_d2, two) = serve("two", "127.0.0.2", 0);
    let port = two.addr.port();
    let (_d3, three) = serve("three", "127.0.0.3", port);
    assert_eq!(three.addr.port(), port);
    let addrs = Arc::new(Mutex::new(vec![[127, 0, 0, 2]]));
    let dns = dns_stub(addrs.clone());
    let d = TempDir::new("dns");
    let px = proxy(
        &d,
        &format!("resolver = [\"{dns}\"]"),
        "",
        &route("/", &format!("upstream = \"http://app.test:{port}\"\nresolve = \"200ms\"")),
    );
    let mut cl = Client::new(px.addr);
    for _ in 0..20 {
        assert_eq!(cl.get("/id", &[]), (200, "two".into()));
    }
    *addrs.lock().unwrap() = vec![[127, 0, 0, 2], [127, 0, 0, 3]];
    eventually(5, "both", || px.said("now resolves to [127.0.0.2:"));
    let got = counts(&hammer(px.addr, 2, 100, "/id", no_fields));
    assert_eq!((got.get("two"), got.get("three")), (Some(&50), Some(&50)), "{got:?}");
    // Requests keep going while the address set changes under them.
    let load = std::thread::spawn({
        let addr = px.addr;
        move || counts(&hammer(addr, 2, 1000, "/id", no_fields))
    });
    *addrs.lock().unwrap() = vec![[127, 0, 0, 3]];
    let during = load.join().unwrap();
    eventually(5, "three only", || px.said(&format!("now resolves to [127.0.0.3:{port}]")));
    let got = counts(&hammer(px.addr, 2, 100, "/id", no_fields));
    assert_eq!(got.get("three"), Some(&100), "{got:?} (during the change: {during:?})");
}

#[test]
fn retries_never_repeat_a_post() {
    let d = TempDir::new("post");
    let a = Py::start(&d, "a", 0.0);
    let b = Py::start(&d, "b", 0.0);
    let keys = format!("upstreams = [{:?}, {:?}]\nretries = 3\nmax_fails = 0", a.url(), b.url());
    let px = proxy(&d, "", "", &route("/", &keys));
    // /drop: the upstream reads the request and closes without answering. A GET goes on
    // to the other upstream (and is dropped there too: 502 after both); a POST does not.
    let mut cl = Client::new(px.addr);
    for i in 0..10 {
        let (status, _) = cl.send("POST", "/drop", &[], &format!("order {i}"));
        assert_eq!(status, 502);
        let (status, _) = cl.send("POST", "/busy", &[], &format!("order {i}"));
        assert_eq!(status, 503, "a 503 to a POST is the answer, not retried");
    }
    let posts = |p: &Py| p.requests().iter().filter(|l| l.starts_with("POST")).count();
    assert_eq!(posts(&a) + posts(&b), 20, "each POST reached exactly one upstream");
    for _ in 0..10 {
        let (status, _) = cl.get("/drop", &[]);
        assert_eq!(status, 502);
    }
    // (A pooled connection that fails unanswered is first retried on a new one to the same
    // upstream, so an upstream may see a GET twice.)
    let gets = |p: &Py| p.requests().iter().filter(|l| l.starts_with("GET /drop")).count();
    assert!(gets(&a) >= 10 && gets(&b) >= 10, "each GET was tried on both: {} and {}", gets(&a), gets(&b));
    // A POST whose upstream refuses the connection goes to the other: nothing was sent.
    drop(b);
    let c = Py::start(&d, "c", 0.0);
    let dead = free_port();
    let keys = format!("upstreams = [\"http://127.0.0.1:{dead}\", {:?}]\nretries = 1", c.url());
    let px2 = proxy(&TempDir::new("post2"), "", "", &route("/", &keys));
    let mut cl = Client::new(px2.addr);
    for i in 0..6 {
        assert_eq!(cl.send("POST", "/x", &[], &format!("p{i}")), (200, "c".into()));
    }
    assert_eq!(posts(&c), 6);
    drop(px);
}

/// A CGI route printing `REMOTE_ADDR`, and an access log.
fn addr_site(d: &TempDir) -> String {
    let p = d.write("cgi/addr.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n%s' \"$REMOTE_ADDR\"\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "[log]\naccess = \"{}\"\n[[vhost]]\n[[vhost.route]]\npath = \"/cgi\"\ncgi = {{ dir = \"cgi\" }}\n",
        d.path().join("access.log").display()
    )
}

fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// The body of one response (de-chunked).
fn body_of(resp: &[u8]) -> String {
    let text = String::from_utf8_lossy(resp);
    let Some((head, mut body)) = text.split_once("\r\n\r\n") else { return String::new() };
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return body.to_string();
    }
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

#[test]
fn proxy_protocol_v1_and_v2_name_the_client() {
    let d = TempDir::new("pp");
    let site = addr_site(&d);
    let cfg = d.write(
        "pp.toml",
        format!(
            "[server]\nworkers = 1\ntrusted_proxies = [\"10.0.0.0/8\"]\n[[listen]]\nport = 0\nproxy_protocol = true\n\
             proxy_protocol_from = [\"127.0.0.0/8\"]\n{site}"
        ),
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let get = b"GET /cgi/addr.sh HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let v1 = [&b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n"[..], get].concat();
    assert_eq!(body_of(&raw_exchange(srv.addr, &v1)), "203.0.113.7");
    let v1_6 = [&b"PROXY TCP6 2001:db8::7 ::1 40000 80\r\n"[..], get].concat();
    assert_eq!(body_of(&raw_exchange(srv.addr, &v1_6)), "2001:db8::7");
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    v2.extend_from_slice(&[198, 51, 100, 9, 127, 0, 0, 1, 0x9c, 0x40, 0, 80]);
    assert_eq!(body_of(&raw_exchange(srv.addr, &[&v2[..], get].concat())), "198.51.100.9");
    // LOCAL (a balancer's own check): the socket's peer.
    let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    assert_eq!(body_of(&raw_exchange(srv.addr, &[&local[..], get].concat())), "127.0.0.1");
    // A trusted balancer's client, then X-Forwarded-For from behind it.
    let via = [
        &b"PROXY TCP4 10.1.2.3 127.0.0.1 40000 80\r\n"[..],
        b"GET /cgi/addr.sh HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 192.0.2.44\r\nConnection: close\r\n\r\n",
    ]
    .concat();
    assert_eq!(body_of(&raw_exchange(srv.addr, &via)), "192.0.2.44");
    // curl's own v1 header (its source is the socket's own address), and curl without one.
    if have("curl") {
        let url = format!("http://{}/cgi/addr.sh", srv.addr);
        let with = Command::new("curl").args(["-sS", "--max-time", "10", "--haproxy-protocol", &url]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&with.stdout), "127.0.0.1", "{with:?}");
        let without = Command::new("curl").args(["-sS", "--max-time", "10", &url]).output().unwrap();
        assert!(!without.status.success() && without.stdout.is_empty(), "{without:?}");
    }
    // A missing or bad header: closed, never answered.
    assert!(raw_exchange(srv.addr, get).is_empty(), "no header: closed");
    assert!(raw_exchange(srv.addr, &[&b"PROXY TCP4 1.2.3.4 nonsense 1 2\r\n"[..], get].concat()).is_empty());
    // The header may arrive in pieces.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&v2[..7]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(&v2[7..20]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(&[&v2[20..], get].concat()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert_eq!(body_of(&out), "198.51.100.9");
    let read_log = || std::fs::read_to_string(d.path().join("access.log")).unwrap_or_default();
    eventually(5, "the access log", || read_log().lines().count() >= 6);
    let log = read_log();
    for who in ["203.0.113.7 ", "2001:db8::7 ", "198.51.100.9 ", "192.0.2.44 "] {
        assert!(log.lines().any(|l| l.starts_with(who)), "access log has {who}: {log}");
    }
}

/// A PROXY header from a peer outside `proxy_protocol_from` is read (the listener still
/// needs one) but names no one: the client is the socket's peer. Without the list the
/// configuration is refused.
#[test]
fn proxy_protocol_is_believed_only_from_listed_balancers() {
    let d = TempDir::new("ppfrom");
    let site = addr_site(&d);
    let cfg = d.write(
        "pp.toml",
        format!("[server]\nworkers = 1\n[[listen]]\nport = 0\nproxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\"]\n{site}"),
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let get = b"GET /cgi/addr.sh HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let forged = [&b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n"[..], get].concat();
    assert_eq!(body_of(&raw_exchange(srv.addr, &forged)), "127.0.0.1");
    assert!(raw_exchange(srv.addr, get).is_empty(), "no header: closed");
    let bad = d.write("bad.toml", format!("[[listen]]\nport = 0\nproxy_protocol = true\n{site}"));
    let out = Command::new(common::BIN).args(["check", "-c", bad.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("proxy_protocol_from"), "{out:?}");
}

#[test]
fn spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let d = TempDir::new("xff");
    let site = addr_site(&d);
    let untrusted = d.write(
        "untrusted.toml",
        format!("[server]\nworkers = 1\ntrusted_proxies = [\"10.0.0.0/8\"]\n[[listen]]\nport = 0\n{site}"),
    );
    let srv = Srv::start(&["--config", untrusted.to_str().unwrap()]);
    let ask = |srv: &Srv, fields: &str| {
        let req = format!("GET /cgi/addr.sh HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n");
        body_of(&raw_exchange(srv.addr, req.as_bytes()))
    };
    assert_eq!(ask(&srv, "X-Forwarded-For: 6.6.6.6\r\n"), "127.0.0.1");
    assert_eq!(ask(&srv, "Forwarded: for=6.6.6.6\r\n"), "127.0.0.1");
    let read_log = || std::fs::read_to_string(d.path().join("access.log")).unwrap_or_default();
    eventually(5, "the access log", || read_log().lines().count() >= 2);
    let log = read_log();
    assert!(!log.contains("6.6.6.6") && log.lines().all(|l| l.starts_with("127.0.0.1 ")), "{log}");
    drop(srv);
    // From a trusted peer (127.0.0.1 listed), the rightmost untrusted address counts.
    let d2 = TempDir::new("xff2");
    let site = addr_site(&d2);
    let trusted = d2.write(
        "trusted.toml",
        format!(
            "[server]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\"]\n[[listen]]\nport = 0\n{site}"
        ),
    );
    let srv = Srv::start(&["--config", trusted.to_str().unwrap()]);
    assert_eq!(ask(&srv, "X-Forwarded-For: 6.6.6.6, 192.0.2.1, 10.9.9.9\r\n"), "192.0.2.1");
    // Only the field client_ip_header names (X-Forwarded-For by default) is read.
    assert_eq!(ask(&srv, "Forwarded: for=192.0.2.2;proto=https\r\n"), "127.0.0.1");
    assert_eq!(ask(&srv, ""), "127.0.0.1");
    drop(srv);
    // A proxy that writes Forwarded: a client's own X-Forwarded-For, which it passes along,
    // names no one.
    let fwd = d2.write(
        "forwarded.toml",
        format!(
            "[server]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\nclient_ip_header = \"forwarded\"\n\
             [[listen]]\nport = 0\n{site}"
        ),
    );
    let srv = Srv::start(&["--config", fwd.to_str().unwrap()]);
    assert_eq!(ask(&srv, "Forwarded: for=192.0.2.2;proto=https\r\n"), "192.0.2.2");
    assert_eq!(ask(&srv, "X-Forwarded-For: 10.0.0.1\r\nForwarded: for=192.0.2.3\r\n"), "192.0.2.3");
    assert_eq!(ask(&srv, "X-Forwarded-For: 10.0.0.1\r\n"), "127.0.0.1");
}
