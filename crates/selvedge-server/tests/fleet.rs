//! A fleet of three `selvedge` processes sharing one real `redis-server` on a loopback
//! port: the member list, TLS session tickets issued by one instance resumed on another
//! (also across a key rotation), a fleet rate limit held across the three loaded together,
//! a configuration API change and a cache purge made on one instance reaching the others,
//! and Redis killed under load (no failed request, the local fallback at once) and
//! restarted (fleet mode again without restarting selvedge).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

/// One fleet at a time: the rate test's numbers need the cores.
static SERIAL: Mutex<()> = Mutex::new(());

struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start(port: u16) -> Redis {
        Redis::start_with(port, &[])
    }

    fn start_with(port: u16, extra: &[&str]) -> Redis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        let r = Redis { child, port };
        eventually(10, "redis-server answers PING", || r.ping());
        r
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 16];
        s.write_all(b"PING\r\n").is_ok() && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends one command (RESP array of `args`) to `port`: the start of the answer.
fn redis_cmd(port: u16, args: &[&str]) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut buf = vec![0u8; 16384];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn have_redis(test: &str) -> bool {
    if have("redis-server") && have("openssl") {
        return true;
    }
    missing_tool("redis-server (and openssl)", test);
    false
}

const CONFIG: &str = r#"
[server]
workers = 1
[[listen]]
address = "127.0.0.1:${PORT}"
[[listen]]
address = "127.0.0.1:${TLSPORT}"
tls = { cert = "cert.pem", key = "key.pem" }
[admin]
listen = "127.0.0.1:${ADMIN}"
api = true
[fleet]
redis = "redis://127.0.0.1:${REDIS}/0"
instance = "${NAME}"
ticket_rotation = "4s"
instances = 3
heartbeat = "200ms"
[[cache]]
name = "pages"
size = "1MiB"
[[vhost]]
[[vhost.route]]
path = "/limited/"
respond = { status = 200, body = "ok\n" }
rate = { requests = 30, per = "1s", burst = 6, scope = "fleet" }
[[vhost.route]]
path = "/cached/"
proxy = { upstream = "http://127.0.0.1:${PORT}/origin", strip_prefix = true }
cache = "pages"
[[vhost.route]]
path = "/origin/"
root = "site/origin"
headers = { "Cache-Control" = "max-age=600" }
[[vhost.route]]
path = "/"
root = "site"
"#;

struct Instance {
    srv: Srv,
    port: u16,
    tls: u16,
    admin: u16,
}

fn fleet(dir: &TempDir, redis: u16) -> Vec<Instance> {
    let conf = site(dir, CONFIG);
    (1..=3).map(|i| instance(dir, &conf, &format!("inst{i}"), redis)).collect()
}

/// The certificate, the site and `config` as `fleet.toml` in `dir`: the file's path.
fn site(dir: &TempDir, config: &str) -> std::path::PathBuf {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    dir.write("cert.pem", ck.cert.pem());
    dir.write("key.pem", ck.signing_key.serialize_pem());
    dir.write("site/index.html", "home\n");
    dir.write("site/origin/page.html", "first\n");
    dir.write("fleet.toml", config)
}

/// One instance of `conf` named `name`, on ports of its own.
fn instance(dir: &TempDir, conf: &Path, name: &str, redis: u16) -> Instance {
    let (port, tls, admin) = (free_port(), free_port(), free_port());
    let mut cmd = Command::new(bin());
    clean_env(&mut cmd);
    cmd.current_dir(dir.path())
        .args(["run", "-c", conf.to_str().unwrap()])
        .env("PORT", port.to_string())
        .env("TLSPORT", tls.to_string())
        .env("ADMIN", admin.to_string())
        .env("REDIS", redis.to_string())
        .env("NAME", name);
    Instance { srv: Srv::spawn(cmd), port, tls, admin }
}

/// Whether `/fleet` on `admin` lists all three instances of [`fleet`].
fn lists_all(admin: u16) -> bool {
    let (s, _, body) = get(admin, "/fleet");
    s == 200 && ["inst1", "inst2", "inst3"].iter().all(|n| body.contains(n))
}

/// `GET path` on `port` with `Host: fleet.test`: status, head and body.
fn get(port: u16, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: fleet.test\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    (text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0), text)
}

/// The sum of `name`'s series (`name{label="…"}` for one of them): -1 without any.
fn metric(admin: u16, name: &str) -> f64 {
    let (_, _, body) = get(admin, "/metrics");
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .fold(None, |sum, v| Some(sum.unwrap_or(0.0) + v))
        .unwrap_or(-1.0)
}

/// `openssl s_client` to `port`, saving the session to `out` or resuming from `inp`:
/// whether the session was resumed.
fn s_client(dir: &Path, port: u16, out: Option<&str>, inp: Option<&str>) -> bool {
    let mut cmd = Command::new("openssl");
    cmd.current_dir(dir).args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-servername", "localhost"]);
    if let Some(o) = out {
        cmd.args(["-sess_out", o]);
    }
    if let Some(i) = inp {
        cmd.args(["-sess_in", i]);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    // TLS 1.3 tickets come after the handshake: stay a moment to read them.
    std::thread::sleep(Duration::from_millis(400));
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("New,") || text.contains("Reused,"), "no handshake: {text}");
    text.contains("Reused,")
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// One client per instance, each sending `per_second` requests a second to `path` on one
/// keep-alive connection for `secs`: statuses (0: a failed exchange) and the slowest
/// answer after `mark` (if given: a moment to do something at, such as killing Redis).
fn load(
    ports: &[u16],
    path: &str,
    per_second: u64,
    secs: u64,
    mark: Option<(Duration, Box<dyn FnOnce() + Send>)>,
) -> (Vec<u16>, Duration) {
    let start = Instant::now() + Duration::from_millis(100);
    let marked_at = mark.as_ref().map(|(d, _)| start + *d);
    let threads: Vec<_> = ports
        .iter()
        .map(|&port| {
            let path = path.to_string();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.set_nodelay(true).unwrap();
                let mut statuses = Vec::new();
                let mut slowest_after = Duration::ZERO;
                let n = per_second * secs;
                for k in 0..n {
                    let at = start + Duration::from_micros(k * 1_000_000 / per_second);
                    if let Some(w) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(w);
                    }
                    let sent = Instant::now();
                    let status = exchange(&mut s, &path).unwrap_or_else(|| {
                        s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                        0
                    });
                    if marked_at.is_some_and(|m| sent > m) {
                        slowest_after = slowest_after.max(sent.elapsed());
                    }
                    statuses.push(status);
                }
                (statuses, slowest_after)
            })
        })
        .collect();
    if let Some((d, f)) = mark {
        std::thread::sleep((start + d).saturating_duration_since(Instant::now()));
        f();
    }
    let mut all = Vec::new();
    let mut slowest = Duration::ZERO;
    for t in threads {
        let (s, w) = t.join().unwrap();
        all.extend(s);
        slowest = slowest.max(w);
    }
    (all, slowest)
}

/// One request on a keep-alive connection: its status, `None` if the exchange failed.
fn exchange(s: &mut TcpStream, path: &str) -> Option<u16> {
    // One write: a request in pieces would wait on Nagle and delayed ACKs.
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: fleet.test\r\n\r\n").as_bytes()).ok()?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
    head.get(9..12).and_then(|s| s.parse().ok())
}

#[test]
fn three_instances_share_members_tickets_limits_changes_and_purges() {
    if !have_redis("three_instances_share_members_tickets_limits_changes_and_purges") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("fleet-share");
    let redis = Redis::start(free_port());
    let fleet = fleet(&dir, redis.port);
    let [a, b, c] = &fleet[..] else { unreachable!() };

    // Members: all three listed by each, within three heartbeats.
    eventually(10, "three live members", || {
        let (s, _, body) = get(a.admin, "/fleet");
        s == 200 && ["inst1", "inst2", "inst3"].iter().all(|n| body.contains(&format!("\"instance\": \"{n}\"")))
    });
    eventually(10, "the ticket keys come from Redis", || {
        fleet.iter().all(|i| metric(i.admin, "selvedge_fleet_tickets_shared") == 1.0)
    });

    // A ticket from A resumes on B and C.
    assert!(!s_client(dir.path(), a.tls, Some("a.sess"), None), "a first handshake is a full one");
    assert!(s_client(dir.path(), b.tls, None, Some("a.sess")), "A's ticket resumes on B");
    assert!(s_client(dir.path(), c.tls, None, Some("a.sess")), "A's ticket resumes on C");
    // Across a rotation: a ticket sealed late in one period (4 s) opens early in the next.
    let period = 4_000;
    while unix_ms() % period < 2_800 || unix_ms() % period > 3_300 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = unix_ms() / period;
    assert!(!s_client(dir.path(), b.tls, Some("b.sess"), None));
    while unix_ms() / period == before || unix_ms() % period < 300 {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(s_client(dir.path(), c.tls, None, Some("b.sess")), "B's ticket resumes on C after the rotation");
    // A fleet without Redis's keys would not: a ticket of another key is refused, and the
    // handshake is a full one (checked by a made-up session is not possible with s_client;
    // the unit tests check foreign keys).

    // The fleet limit: 30/s, burst 6, across three instances each offered 40/s for 5 s.
    let began = Instant::now();
    let (statuses, _) = load(&[a.port, b.port, c.port], "/limited/", 40, 5, None);
    let took = began.elapsed();
    assert!(took < Duration::from_millis(5_600), "the load kept its pace: {took:?}");
    let ok = statuses.iter().filter(|s| **s == 200).count() as f64;
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok as usize + refused, statuses.len(), "only 200 and 429: {statuses:?}");
    let expected = 30.0 * 5.0 + 6.0;
    let fallbacks: Vec<f64> = fleet.iter().map(|i| metric(i.admin, "selvedge_fleet_rate_fallbacks_total")).collect();
    assert!(
        (ok - expected).abs() <= expected * 0.1,
        "admitted {ok}, expected {expected} ± 10% (fallbacks {fallbacks:?})"
    );
    let asks: f64 = fleet.iter().map(|i| metric(i.admin, "selvedge_fleet_rate_asks_total")).sum();
    assert!(asks > 0.0 && asks < statuses.len() as f64, "refusals are remembered: {asks} asks");
    let on_workers: f64 = fleet.iter().map(|i| metric(i.admin, r#"selvedge_fleet_rate_asks_total{on="worker"}"#)).sum();
    assert!(on_workers > asks * 0.8, "the workers ask on their own connections: {on_workers} of {asks}");

    // A configuration change through A's API is made on B and C.
    let (s, text) = http(a.admin, "PUT", "/config/vhost/0/route/3/headers", r#"{"X-Fleet": "one"}"#);
    assert_eq!(s, 200, "{text}");
    for i in [b, c] {
        eventually(10, "the change reaches the other instances", || {
            let (s, head, _) = get(i.port, "/index.html");
            s == 200 && head.to_ascii_lowercase().contains("x-fleet: one")
        });
    }
    assert_eq!(metric(a.admin, "selvedge_fleet_events_received_total"), 0.0, "A does not take its own event");

    // A purge on A empties B's cache.
    for _ in 0..2 {
        assert_eq!(get(b.port, "/cached/page.html").2, "first\n");
    }
    let (_, head, _) = get(b.port, "/cached/page.html");
    assert!(head.to_ascii_lowercase().contains("cache-status: selvedge; hit"), "{head}");
    let (s, text) = http(a.admin, "POST", "/cache/purge?prefix=http://fleet.test/cached/", "");
    assert_eq!(s, 200, "{text}");
    // B goes to its origin again: the stored page was purged there.
    eventually(10, "B's stored page is purged", || {
        let (_, head, _) = get(b.port, "/cached/page.html");
        head.to_ascii_lowercase().contains("cache-status: selvedge; fwd=uri-miss")
    });
    assert!(b.srv.said("cache purge from the fleet"), "B logs it");

    // A clean stop takes the instance out of the list at once.
    let a_admin = a.admin;
    let mut fleet = fleet;
    let Instance { srv, .. } = fleet.pop().unwrap();
    srv.stop();
    let (_, _, body) = get(a_admin, "/fleet");
    assert!(!body.contains("\"inst3\""), "{body}");
    drop(redis);
}

#[test]
fn redis_killed_under_load_falls_back_at_once_and_comes_back() {
    if !have_redis("redis_killed_under_load_falls_back_at_once_and_comes_back") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("fleet-kill");
    let port = free_port();
    let redis = std::sync::Arc::new(Mutex::new(Redis::start(port)));
    let fleet = fleet(&dir, port);
    let ports: Vec<u16> = fleet.iter().map(|i| i.port).collect();
    eventually(10, "three live members", || lists_all(fleet[0].admin));
    let r2 = redis.clone();
    let kill: Box<dyn FnOnce() + Send> = Box::new(move || r2.lock().unwrap().kill());
    let (statuses, slowest) = load(&ports, "/limited/", 40, 4, Some((Duration::from_secs(2), kill)));
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "no failed request: {statuses:?}");
    // A request waits for Redis `[fleet] timeout` (5 ms) at most; one that waited for the
    // dead Redis's round trip would take up to its 1 s limit. 500 ms leaves room for a
    // loaded machine's scheduling.
    assert!(slowest < Duration::from_millis(500), "an answer after the kill took {slowest:?}");
    for i in &fleet {
        assert_eq!(metric(i.admin, "selvedge_fleet_redis_up"), 0.0);
        assert!(metric(i.admin, "selvedge_fleet_rate_fallbacks_total") > 0.0);
        assert!(i.srv.said("fleet: Redis failed"), "logged");
    }
    // The local limiters hold the fleet's limit between them: 30/s divided by 3.
    let (statuses, _) = load(&ports, "/limited/", 40, 3, None);
    let ok = statuses.iter().filter(|s| **s == 200).count() as f64;
    let expected = 30.0 * 3.0 + 6.0;
    let per: Vec<usize> = statuses.chunks(120).map(|c| c.iter().filter(|s| **s == 200).count()).collect();
    assert!(ok <= expected * 1.1 + 3.0, "admitted {ok} with Redis down, expected at most {expected}: {per:?}");

    // Redis again on the same port: fleet mode resumes by itself.
    *redis.lock().unwrap() = Redis::start(port);
    for i in &fleet {
        eventually(10, "fleet mode again", || metric(i.admin, "selvedge_fleet_redis_up") == 1.0);
    }
    let asks_before: f64 = fleet.iter().map(|i| metric(i.admin, "selvedge_fleet_rate_asks_total")).sum();
    let (statuses, _) = load(&ports, "/limited/", 40, 2, None);
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429));
    let asks_after: f64 = fleet.iter().map(|i| metric(i.admin, "selvedge_fleet_rate_asks_total")).sum();
    assert!(asks_after > asks_before, "the limit is counted in Redis again");
    eventually(10, "the members list again", || lists_all(fleet[0].admin));
}

#[test]
fn idle_connections_redis_closes_are_made_anew_without_leaving_fleet_mode() {
    if !have_redis("idle_connections_redis_closes_are_made_anew_without_leaving_fleet_mode") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("fleet-idle");
    let port = free_port();
    // Redis closes a connection idle for a second; `CLIENT KILL` closes the busy ones.
    let _redis = Redis::start_with(port, &["--timeout", "1"]);
    let conf = site(&dir, CONFIG);
    let a = instance(&dir, &conf, "inst1", port);
    eventually(10, "a live member", || get(a.admin, "/fleet").2.contains("inst1"));
    for round in 0..4 {
        let (statuses, slowest) = load(&[a.port], "/limited/", 40, 1, None);
        assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "round {round}: {statuses:?}");
        assert!(slowest < Duration::from_millis(500), "round {round}: {slowest:?}");
        if round == 1 {
            assert!(redis_cmd(port, &["CLIENT", "KILL", "TYPE", "normal"]).starts_with(':'));
        } else {
            std::thread::sleep(Duration::from_millis(2_500));
        }
    }
    assert_eq!(metric(a.admin, "selvedge_fleet_redis_up"), 1.0);
    assert!(!a.srv.said("fleet: Redis failed"), "a closed connection is not a failed Redis");
    let on_workers = metric(a.admin, r#"selvedge_fleet_rate_asks_total{on="worker"}"#);
    assert!(on_workers > 0.0, "the workers' connections were made again: {on_workers}");
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {pid}");
}

#[test]
fn a_stalled_redis_costs_a_request_at_most_the_timeout_and_is_marked_down() {
    if !have_redis("a_stalled_redis_costs_a_request_at_most_the_timeout_and_is_marked_down") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("fleet-stall");
    let port = free_port();
    let redis = Redis::start(port);
    let pid = redis.child.id();
    let fleet = fleet(&dir, port);
    let ports: Vec<u16> = fleet.iter().map(|i| i.port).collect();
    eventually(10, "three live members", || lists_all(fleet[0].admin));
    // Redis stops answering (its process stopped: connections stay open, replies never
    // come) for 3 s, 1 s into a paced load whose round trips run on the workers' own
    // connections.
    // 500 ms into the stall, every instance has marked Redis down: three late answers in a
    // row, not the one-second limit of a round trip, decided it.
    let admins: Vec<u16> = fleet.iter().map(|i| i.admin).collect();
    let up_during = std::sync::Arc::new(Mutex::new(Vec::new()));
    let up = up_during.clone();
    let stall: Box<dyn FnOnce() + Send> = Box::new(move || {
        signal(pid, "STOP");
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            *up.lock().unwrap() = admins.iter().map(|a| metric(*a, "selvedge_fleet_redis_up")).collect();
            std::thread::sleep(Duration::from_millis(2_500));
            signal(pid, "CONT");
        });
    });
    let (statuses, slowest) = load(&ports, "/limited/", 40, 5, Some((Duration::from_secs(1), stall)));
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "no failed request: {statuses:?}");
    // The stall lasts 3 s: a request that waited for it would take a second or more.
    assert!(slowest < Duration::from_millis(500), "an answer during the stall took {slowest:?}");
    assert_eq!(*up_during.lock().unwrap(), [0.0; 3], "redis_up 500 ms into the stall");
    for i in &fleet {
        assert!(i.srv.said("fleet: Redis failed"), "the late answers marked Redis down");
        assert!(metric(i.admin, "selvedge_fleet_rate_fallbacks_total") > 0.0);
    }
    for i in &fleet {
        eventually(10, "fleet mode again", || metric(i.admin, "selvedge_fleet_redis_up") == 1.0);
    }
    let asks_before: f64 = fleet.iter().map(|i| metric(i.admin, "selvedge_fleet_rate_asks_total")).sum();
    let (statuses, _) = load(&ports, "/limited/", 40, 1, None);
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429));
    let asks_after: f64 = fleet.iter().map(|i| metric(i.admin, "selvedge_fleet_rate_asks_total")).sum();
    assert!(asks_after > asks_before, "the limit is counted in Redis again");
}

#[test]
fn sentinels_name_the_primary_and_a_failover_is_followed() {
    if !have_redis("sentinels_name_the_primary_and_a_failover_is_followed") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("fleet-sentinel");
    let (p, r, sp) = (free_port(), free_port(), free_port());
    let mut primary = Redis::start(p);
    let _replica = Redis::start_with(r, &["--replicaof", "127.0.0.1", &p.to_string()]);
    eventually(10, "the replica in sync", || redis_cmd(r, &["INFO", "replication"]).contains("master_link_status:up"));
    let conf = dir.write(
        "sentinel.conf",
        format!(
            "port {sp}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {p} 1\n\
             sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 2000\n"
        ),
    );
    // Killed when dropped, as the servers are, whatever the test's end.
    let _sentinel = Redis {
        child: Command::new("redis-server")
            .args([conf.to_str().unwrap(), "--sentinel"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        port: sp,
    };
    eventually(10, "the sentinel knows the replica", || {
        redis_cmd(sp, &["SENTINEL", "replicas", "mymaster"]).contains(&r.to_string())
    });
    // The `redis` URL names no server that runs: the sentinels say where the primary is.
    let unused = free_port();
    let text = CONFIG
        .replace(
            "redis = \"redis://127.0.0.1:${REDIS}/0\"",
            &format!("redis = \"redis://127.0.0.1:{unused}/0\"\nsentinels = [\"127.0.0.1:{sp}\"]"),
        )
        .replace("instances = 3", "instances = 1");
    let conf = site(&dir, &text);
    let Instance { srv, port, admin, .. } = instance(&dir, &conf, "sentinel-1", unused);
    eventually(10, "listed through the primary the sentinels named", || {
        let (s, _, body) = get(admin, "/fleet");
        s == 200 && body.contains("sentinel-1")
    });
    assert_eq!(metric(admin, "selvedge_fleet_redis_up"), 1.0, "the primary was known before any call");
    assert!(!srv.said("fleet: Redis failed"), "no call reached the redis address");
    // The primary dies under load; the sentinel promotes the replica.
    let kill: Box<dyn FnOnce() + Send> = Box::new(move || primary.kill());
    let (statuses, _) = load(&[port], "/limited/", 40, 6, Some((Duration::from_secs(1), kill)));
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "no failed request: {statuses:?}");
    eventually(20, "the replica promoted", || redis_cmd(r, &["INFO", "replication"]).contains("role:master"));
    eventually(20, "fleet mode on the new primary", || metric(admin, "selvedge_fleet_redis_up") == 1.0);
    assert!(srv.said("the sentinels name a new Redis primary"), "logged");
    let asks = metric(admin, "selvedge_fleet_rate_asks_total");
    let (statuses, _) = load(&[port], "/limited/", 40, 1, None);
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429));
    assert!(metric(admin, "selvedge_fleet_rate_asks_total") > asks, "counted in Redis again");
    assert!(redis_cmd(r, &["EXISTS", "selvedge:members"]).starts_with(":1"), "the new primary has the heartbeats");
}
