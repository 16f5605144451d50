//! Route checks over real sockets, on HTTP/1.1 and h2c: Basic auth (bcrypt and {SHA}
//! entries; wrong, malformed and oversized credentials; the memory of good ones; a login
//! flood that does not stall anyone else; SIGHUP rereads the file; MD5-crypt refused),
//! allow/deny lists (by source address, 127.0.0.0/8), rate limits (a burst's exact count
//! of 200s and 429s; 10,000 client addresses against a bounded table), per-route
//! `max_body`, and `max_connections_per_ip` at accept.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

const BOTH: [Proto; 2] = [Proto::H1, Proto::H2];

fn start(d: &TempDir, toml: &str) -> Srv {
    let cfg = d.write("selvedge.toml", format!("[server]\nworkers = 2\n[[listen]]\nport = 0\n{toml}"));
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

fn flag(p: Proto) -> &'static str {
    match p {
        Proto::H1 => "--http1.1",
        Proto::H2 => "--http2-prior-knowledge",
    }
}

/// One request with curl (`-i`), parsed.
fn fetch(p: Proto, srv: &Srv, path: &str, args: &[&str]) -> Resp {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "60", flag(p)])
        .args(args)
        .arg(format!("http://{}{path}", srv.addr))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {path}: {}", String::from_utf8_lossy(&out.stderr));
    parse(&out.stdout, true).expect("a response")
}

/// The status codes of `n` requests for `path` on one connection, from `source`: curl
/// on HTTP/1.1; nghttp on h2c, from 127.0.0.1 (curl 7.88 cannot reuse an h2c
/// prior-knowledge connection, and nghttp cannot choose its source address).
fn codes(p: Proto, srv: &Srv, path: &str, n: usize, source: &str) -> Vec<u16> {
    if p == Proto::H2 {
        assert_eq!(source, "127.0.0.1", "nghttp connects from 127.0.0.1");
        let urls: Vec<String> = (0..n).map(|i| format!("http://{}{path}?n={i}", srv.addr)).collect();
        let out = Command::new("nghttp").args(["-ns"]).args(&urls).output().expect("nghttp");
        let text = String::from_utf8_lossy(&out.stdout);
        // `id responseEnd requestStart process code size request path`, in completion order.
        let mut rows: Vec<(u32, u16)> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((f.first()?.parse().ok()?, f.get(4)?.parse().ok()?))
            })
            .collect();
        rows.sort();
        assert_eq!(rows.len(), n, "{text}");
        return rows.into_iter().map(|(_, c)| c).collect();
    }
    let url = format!("http://{}{path}", srv.addr);
    let out = Command::new("curl")
        .args(["-sS", "-w", "%{http_code}\\n", "--interface", source, flag(p)])
        .args(std::iter::repeat_n(["-o", "/dev/null", url.as_str()], n).flatten())
        .output()
        .expect("curl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.parse().unwrap()).collect()
}

/// The status of an upload of `file` that the server refuses from its declared length.
/// On h2 the refusal is followed by RST_STREAM(NO_ERROR) (RFC 9113 §8.1: the client keeps
/// the response); curl 7.88 drops the response when that RST overtakes its upload, so
/// h2 asks nghttp, which keeps it.
fn refused_upload(p: Proto, srv: &Srv, path: &str, file: &std::path::Path) -> u16 {
    if p == Proto::H1 {
        return fetch(p, srv, path, &["--data-binary", &format!("@{}", file.display())]).status;
    }
    let out = Command::new("nghttp")
        .args(["-v", "-d"])
        .arg(file)
        .arg(format!("http://{}{path}", srv.addr))
        .output()
        .expect("nghttp");
    let text = String::from_utf8_lossy(&out.stdout);
    let status = text.lines().find_map(|l| l.split_once(":status: ").and_then(|(_, s)| s.trim().parse().ok()));
    status.unwrap_or_else(|| panic!("no :status from nghttp: {text}"))
}

fn basic(user: &str, pass: &str) -> String {
    format!("Authorization: Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}")))
}

/// `{SHA}` as `htpasswd -s` writes it.
fn sha_entry(pass: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, pass.as_bytes());
    format!("{{SHA}}{}", base64::engine::general_purpose::STANDARD.encode(d))
}

#[test]
fn basic_auth_answers_every_kind_of_credentials() {
    let d = TempDir::new("auth");
    d.write("site/index.html", "members only\n");
    d.write("open/index.html", "open\n");
    let alice = bcrypt::hash("wonderland", 4).unwrap();
    d.write("users.htpasswd", format!("# users\nalice:{alice}\nbob:{}\n\n", sha_entry("builder")));
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nauth = { realm = \"staff\", htpasswd = \"users.htpasswd\" }\n",
    );
    let long = format!("Authorization: Basic {}", "QUFB".repeat(2000));
    let colonless = format!("Authorization: Basic {}", base64::engine::general_purpose::STANDARD.encode("alice"));
    for p in BOTH {
        let r = fetch(p, &srv, "/", &[]);
        assert_eq!(r.status, 401, "{p:?}");
        assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"staff\", charset=\"UTF-8\""));
        for good in [basic("alice", "wonderland"), basic("bob", "builder")] {
            let r = fetch(p, &srv, "/", &["-H", &good]);
            assert_eq!((r.status, r.text().as_str()), (200, "members only\n"), "{good}");
        }
        for bad in [
            basic("alice", "wonderlanD"),
            basic("alice", ""),
            basic("bob", "builder "),
            basic("mallory", "wonderland"),
            basic("", "builder"),
            "Authorization: Basic !!!not base64!!!".to_string(),
            "Authorization: Basic".to_string(),
            "Authorization: Bearer d29uZGVybGFuZA==".to_string(),
            colonless.clone(),
            long.clone(),
        ] {
            let r = fetch(p, &srv, "/", &["-H", &bad]);
            assert_eq!(r.status, 401, "{bad:.60}");
            assert!(r.header("www-authenticate").is_some());
            assert!(!r.text().contains("members"));
        }
    }
    // SIGHUP rereads the file: a new password works, the old one (remembered) no longer.
    let alice2 = bcrypt::hash("looking-glass", 4).unwrap();
    d.write("users.htpasswd", format!("alice:{alice2}\n"));
    srv.signal("HUP");
    eventually(10, "the new password", || {
        fetch(Proto::H1, &srv, "/", &["-H", &basic("alice", "looking-glass")]).status == 200
    });
    assert_eq!(fetch(Proto::H2, &srv, "/", &["-H", &basic("alice", "wonderland")]).status, 401);
    assert_eq!(fetch(Proto::H2, &srv, "/", &["-H", &basic("bob", "builder")]).status, 401);
}

#[test]
fn bcrypt_is_remembered_and_a_login_flood_stalls_nobody() {
    let d = TempDir::new("auth-flood");
    d.write("site/index.html", "members only\n");
    d.write("open/index.html", "open\n");
    // Cost 11: a verification takes long enough to see (more in this debug build).
    let slow = bcrypt::hash("patience", 11).unwrap();
    d.write("users.htpasswd", format!("carol:{slow}\n"));
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nauth = { htpasswd = \"users.htpasswd\" }\n\
         [[vhost.route]]\npath = \"/open\"\nroot = \"open\"\n",
    );
    let good = basic("carol", "patience");
    let t = Instant::now();
    assert_eq!(fetch(Proto::H1, &srv, "/", &["-H", &good]).status, 200);
    let first = t.elapsed();
    let t = Instant::now();
    for p in [Proto::H1, Proto::H2, Proto::H1, Proto::H2] {
        assert_eq!(fetch(p, &srv, "/", &["-H", &good]).status, 200);
    }
    let again = t.elapsed() / 4;
    eprintln!("first check {first:?}, remembered {again:?}");
    assert!(again * 3 < first, "a remembered check costs no bcrypt: first {first:?}, then {again:?}");

    // 24 wrong passwords at once: the bcrypt queue fills, the workers do not.
    let flood: Vec<_> = (0..24)
        .map(|i| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                let mut s = connect(addr);
                s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                let cred = base64::engine::general_purpose::STANDARD.encode(format!("carol:wrong{i}"));
                write!(s, "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Basic {cred}\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut b = Vec::new();
                let _ = s.read_to_end(&mut b);
                parse(&b, true).map(|r| r.status)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for p in BOTH {
        let t = Instant::now();
        assert_eq!(fetch(p, &srv, "/open/", &[]).text(), "open\n");
        assert_eq!(fetch(p, &srv, "/", &["-H", &good]).status, 200, "remembered credentials skip the queue");
        let took = t.elapsed();
        // Behind the queue they would wait for 24 verifications on one thread per core;
        // up to a quarter of that is room for the curls starting on a machine the flood
        // keeps busy (three on two cores).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        let room = (24 / cores / 4).max(1);
        assert!(took < first.max(Duration::from_millis(300)) * room, "{p:?} waited {took:?} during the flood");
    }
    for f in flood {
        assert_eq!(f.join().unwrap(), Some(401));
    }
}

/// `$apr1$` entries, as Debian's `htpasswd` writes them by default (`-m`), log in; crypt(3)
/// and plain entries are refused with their line.
#[test]
fn apr1_entries_log_in_and_plain_entries_are_refused_with_their_line() {
    let d = TempDir::new("auth-apr1");
    d.write("site/index.html", "x");
    // The real tool's line when it is there (./scripts/setup installs apache2-utils).
    let apr1 = match Command::new("htpasswd").args(["-nbm", "carol", "pass word"]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => {
            common::missing_tool("htpasswd", "apr1_entries_log_in");
            "carol:$apr1$wyd5TBXD$fYBK/Ue6d1UK1VdEDqQkV0".to_string()
        }
    };
    assert!(apr1.starts_with("carol:$apr1$"), "{apr1}");
    d.write(
        "users.htpasswd",
        format!(
            "bob:{}
{apr1}
",
            sha_entry("b")
        ),
    );
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nauth = { htpasswd = \"users.htpasswd\" }\n",
    );
    for p in BOTH {
        assert_eq!(fetch(p, &srv, "/", &["-u", "carol:pass word"]).status, 200, "{p:?}");
        assert_eq!(fetch(p, &srv, "/", &["-u", "carol:pass-word"]).status, 401, "{p:?}");
    }
    drop(srv);
    let cfg = d.write(
        "selvedge.toml",
        "[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n\
         auth = { htpasswd = \"users.htpasswd\" }\n",
    );
    d.write("users.htpasswd", format!("bob:{}\nold:$6$salt$hash\n", sha_entry("b")));
    let out = Command::new(BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("selvedge.toml:7:8:"), "the auth key's position: {err}");
    assert!(err.contains("users.htpasswd:2:") && err.contains("htpasswd -B"), "{err}");
    d.write("users.htpasswd", "plain:secret\n");
    let out = Command::new(BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("users.htpasswd:1:"), "{out:?}");
}

#[test]
fn allow_and_deny_by_client_address() {
    let d = TempDir::new("ip");
    d.write("site/index.html", "inside\n");
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nallow = [\"127.0.0.0/8\", \"::1\"]\ndeny = [\"127.0.0.5\", \"127.0.1.0/24\"]\n\
         [[vhost.route]]\npath = \"/office\"\nroot = \"site\"\nallow = [\"127.0.0.2/32\"]\n\
         headers = { \"X-Route\" = \"office\" }\n",
    );
    for p in BOTH {
        for (src, path, want) in [
            ("127.0.0.1", "/", 200),
            ("127.0.0.5", "/", 403),
            ("127.0.1.77", "/", 403),
            ("127.0.2.1", "/", 200),
            ("127.0.0.2", "/office/", 200),
            ("127.0.0.1", "/office/", 403),
            ("127.0.0.3", "/office/", 403),
        ] {
            let r = fetch(p, &srv, path, &["--interface", src]);
            assert_eq!(r.status, want, "{p:?} from {src} {path}");
            if want == 403 {
                assert!(!r.text().contains("inside"));
            }
            if path == "/office/" {
                assert_eq!(r.header("x-route"), Some("office"), "the route's fields on its 403 too");
            }
        }
    }
}

#[test]
fn a_burst_over_the_rate_limit_gets_exactly_the_429s_it_should() {
    let d = TempDir::new("rate");
    d.write("site/index.html", "ok\n");
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nrate = { requests = 5, per = \"1h\", burst = 5 }\n\
         [[vhost.route]]\npath = \"/free\"\nroot = \"site\"\n",
    );
    for (p, src) in [(Proto::H1, "127.0.0.11"), (Proto::H2, "127.0.0.1")] {
        let got = codes(p, &srv, "/", 20, src);
        assert_eq!(got.len(), 20);
        assert_eq!(got.iter().filter(|&&c| c == 200).count(), 5, "{p:?}: {got:?}");
        assert_eq!(got.iter().filter(|&&c| c == 429).count(), 15, "{p:?}: {got:?}");
        assert!(got[..5].iter().all(|&c| c == 200), "{got:?}");
        let r = fetch(p, &srv, "/", &["--interface", src]);
        assert_eq!(r.status, 429);
        let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((700..=720).contains(&wait), "one request every 12 minutes: {wait}");
        // Another route, and another address, are not limited.
        assert!(codes(p, &srv, "/free/", 10, src).iter().all(|&c| c == 200));
    }
    assert_eq!(codes(Proto::H1, &srv, "/", 5, "127.0.0.13"), [200; 5], "another address has its own");
}

/// One GET from `source` on a new connection: the status.
fn get_from(addr: SocketAddr, source: Ipv4Addr) -> u16 {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    s.connect(&addr.into()).unwrap();
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A refused connection is closed (or reset) unanswered: status 0.
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
    parse(&b, false).map_or(0, |r| r.status)
}

#[test]
fn ten_thousand_client_addresses_against_a_bounded_limiter() {
    let d = TempDir::new("rate-many");
    d.write("site/index.html", "ok\n");
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n\
         rate = { requests = 1, per = \"1h\", burst = 1, max_clients = 1000 }\n\
         [[vhost.route]]\npath = \"/free\"\nroot = \"site\"\n",
    );
    // The request path's code runs once before the baseline (the server lets go of
    // start-up's code pages, and those a request brings back are not the limiter's).
    assert_eq!(codes(Proto::H1, &srv, "/free/", 3, "127.0.0.1"), [200; 3]);
    let t = Instant::now();
    let rss = |pid: u32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        s.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = rss(srv.pid());
    let addr = srv.addr;
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            std::thread::spawn(move || {
                let mut ok = 0;
                for i in (t..10_000).step_by(4) {
                    let ip = Ipv4Addr::from(0x7f01_0000 + i);
                    match get_from(addr, ip) {
                        200 => ok += 1,
                        429 => {}
                        other => panic!("{ip}: {other}"),
                    }
                }
                ok
            })
        })
        .collect();
    let admitted: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let after = rss(srv.pid());
    eprintln!("10,000 addresses in {:?}; RSS {before} kB -> {after} kB", t.elapsed());
    // The table holds 1,008 addresses (16 shards of 63); once a shard is full of clients
    // inside their hour, its newcomers share one bucket, which admits one request.
    assert_eq!(admitted, 1008 + 16);
    assert!(after < before + 16 * 1024, "memory grew from {before} kB to {after} kB");
    // A client in the table is still limited; the limit never opened up.
    assert_eq!(get_from(addr, Ipv4Addr::new(127, 1, 0, 0)), 429);
    assert!(t.elapsed() < Duration::from_secs(60));
}

#[test]
fn max_body_per_route() {
    let d = TempDir::new("max-body");
    d.write("cgi/echo.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\ncat\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path().join("cgi/echo.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/small\"\ncgi = { dir = \"cgi\" }\nmax_body = \"1KiB\"\n\
         [[vhost.route]]\npath = \"/large\"\ncgi = { dir = \"cgi\" }\n",
    );
    let small = d.write("small.txt", "s".repeat(1000));
    let big = d.write("big.txt", "b".repeat(3000));
    let at = |f: &std::path::Path| format!("@{}", f.display());
    for p in BOTH {
        let r = fetch(p, &srv, "/small/echo.sh", &["--data-binary", &at(&small)]);
        assert_eq!((r.status, r.body.len()), (200, 1000), "{p:?}");
        assert_eq!(refused_upload(p, &srv, "/small/echo.sh", &big), 413, "{p:?}: a declared length over the limit");
        // Without a declared length (chunked on HTTP/1.1, no content-length on h2).
        let no_length = if p == Proto::H1 { "Transfer-Encoding: chunked" } else { "Content-Length:" };
        let r = fetch(
            p,
            &srv,
            "/small/echo.sh",
            &["-T", big.to_str().unwrap(), "-X", "POST", "-H", no_length, "-H", "Expect:"],
        );
        assert_eq!(r.status, 413, "{p:?}: counted as read");
        let r = fetch(p, &srv, "/large/echo.sh", &["--data-binary", &at(&big)]);
        assert_eq!((r.status, r.body.len()), (200, 3000));
    }
}

#[test]
fn connections_over_max_connections_per_ip_are_closed_at_accept() {
    let d = TempDir::new("per-ip");
    d.write("site/index.html", "ok\n");
    let cfg = d.write(
        "selvedge.toml",
        "[server]\nworkers = 2\nmax_connections_per_ip = 2\n[[listen]]\nport = 0\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let a = connect(srv.addr);
    let b = connect(srv.addr);
    std::thread::sleep(Duration::from_millis(100));
    // A third from the same address: closed before anything is read.
    let mut c = connect(srv.addr);
    let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut buf = [0u8; 64];
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)), "the third connection was served");
    // Another address is not affected.
    assert_eq!(get_from(srv.addr, Ipv4Addr::new(127, 0, 0, 9)), 200);
    // One closes: there is room again.
    drop(a);
    eventually(5, "room for a new connection", || get_from(srv.addr, Ipv4Addr::LOCALHOST) == 200);
    drop(b);
}
