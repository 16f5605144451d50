//! FastCGI routes against Debian's php-fpm, run by each test with a pool of its own on a
//! Unix socket in a temp dir: the variables PHP sees, a 5 MB upload (HTTP/1.1 and HTTP/2),
//! a script that streams with `flush()`, script errors (500 and its log line) and
//! application failures (502/504), the path-safety rules, connection reuse
//! (`FCGI_KEEP_CONN`), idle connections released across workers, and the client address
//! behind a trusted proxy.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::fpm::Fpm;
use common::{connect, eventually, request, Resp, Srv, TempDir};

const VARS_PHP: &str = r#"<?php
header("Content-Type: application/json");
$keys = ["SCRIPT_NAME", "SCRIPT_FILENAME", "PATH_INFO", "PATH_TRANSLATED", "QUERY_STRING",
  "REQUEST_METHOD", "REQUEST_URI", "DOCUMENT_ROOT", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL",
  "SERVER_SOFTWARE", "GATEWAY_INTERFACE", "REMOTE_ADDR", "REMOTE_PORT", "REQUEST_SCHEME", "HTTPS", "CONTENT_TYPE",
  "CONTENT_LENGTH", "HTTP_HOST", "HTTP_COOKIE", "HTTP_X_MULTI", "HTTP_PROXY", "HTTP_X_UNDER",
  "HTTP_AUTHORIZATION", "PHP_SELF", "PHP_AUTH_USER", "PHP_AUTH_PW", "APP_ENV", "REDIRECT_STATUS"];
$out = [];
foreach ($keys as $k) { $out[$k] = $_SERVER[$k] ?? null; }
$out["GET"] = $_GET;
$out["POST"] = $_POST;
$out["COOKIE"] = $_COOKIE;
echo json_encode($out);
"#;

const UPLOAD_PHP: &str = r#"<?php
$in = fopen("php://input", "rb");
$n = 0; $h = hash_init("sha256");
while (!feof($in)) { $b = fread($in, 65536); $n += strlen($b); hash_update($h, $b); }
header("Content-Type: text/plain");
echo $n, " ", hash_final($h), "\n";
"#;

const STREAM_PHP: &str = r#"<?php
header("Content-Type: text/plain");
echo "first\n";
while (ob_get_level()) { ob_end_flush(); }
flush();
sleep(1);
echo "second\n";
"#;

const ANSWERS_PHP: &str = r#"<?php
switch ($_GET["q"] ?? "") {
  case "404": http_response_code(404); echo "nope\n"; break;
  case "redirect": header("Location: /elsewhere"); break;
  case "created": header("Location: http://example.com/new", true, 201); echo "made\n"; break;
  case "cookies": setcookie("a", "1"); setcookie("b", "2"); echo "ok"; break;
  case "length": header("Content-Length: 5"); echo "hello"; break;
  case "big": echo str_repeat("0123456789abcdef", 1 << 16); break;
  case "fatal": undefined_function_for_the_test(); break;
  case "warn": error_log("a line for the error log"); echo "warned\n"; break;
  case "slow": sleep(3); echo "late\n"; break;
  case "nap": usleep(200000); echo getmypid(); break;
  case "pid": echo getmypid(); break;
  case "nohead": header("Content-Type:"); break;
  default: echo "default\n";
}
"#;

/// A site under `root/` with the test scripts, php-fpm, and selvedge in front of both
/// (`table` adds keys to the route's `fastcgi` table).
fn start(children: u32, workers: u32, table: &str) -> (TempDir, Fpm, Srv) {
    let d = TempDir::new("fastcgi");
    d.write("root/vars.php", VARS_PHP);
    d.write("root/upload.php", UPLOAD_PHP);
    d.write("root/stream.php", STREAM_PHP);
    d.write("root/answers.php", ANSWERS_PHP);
    d.write("root/index.php", "<?php echo 'index of ', $_SERVER['SCRIPT_NAME'];\n");
    d.write("root/syntax.php", "<?php this is not php\n");
    d.write(
        "root/dir.php/inner.php",
        "<?php echo 'inner ', $_SERVER['SCRIPT_NAME'], '|', $_SERVER['PATH_INFO'] ?? '';\n",
    );
    d.write("root/docs/index.php", "<?php echo 'docs index';\n");
    d.write("root/uploads/avatar.jpg", "<?php echo 'an uploaded file run as PHP';\n");
    d.write("root/secret.inc", "<?php $password = 'hunter2';\n");
    d.write("root/.hidden.php", "<?php echo 'hidden';\n");
    d.write("outside.php", "<?php echo 'outside the root';\n");
    std::os::unix::fs::symlink(d.path().join("outside.php"), d.path().join("root/escape.php")).unwrap();
    let fpm = Fpm::start(&d, children);
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = {workers}\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\n\
             fastcgi = {{ address = \"unix:{sock}\", root = \"root\", params = {{ APP_ENV = \"test\" }}{table} }}\n",
            sock = fpm.sock.display()
        ),
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    (d, fpm, srv)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let i = b.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let n = usize::from_str_radix(std::str::from_utf8(&b[..i]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[i + 4 + n..];
    }
}

/// The body, dechunked if it was sent chunked.
fn body(r: &Resp) -> String {
    if r.header("transfer-encoding") == Some("chunked") {
        String::from_utf8(dechunk(&r.body)).unwrap()
    } else {
        r.text()
    }
}

fn log_has(srv: &Srv, what: &str) -> bool {
    srv.stderr.lock().unwrap().iter().any(|l| l.contains(what))
}

fn json_field(text: &str, key: &str) -> Option<String> {
    // A small reader for the flat string values of vars.php's output.
    let pat = format!("\"{key}\":");
    let at = text.find(&pat)? + pat.len();
    let rest = &text[at..];
    if rest.starts_with("null") {
        return None;
    }
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(rest[..end].replace("\\/", "/"))
}

fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let out =
        Command::new("curl").args(["-sS", "--max-time", "30", "-H", "Expect:"]).args(args).output().expect("curl");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stderr).into_owned(), out.stdout)
}

#[test]
fn variables_php_sees() {
    let (d, _fpm, s) = start(2, 1, "");
    let root = d.path().join("root").canonicalize().unwrap();
    let r = request(
        s.addr,
        "GET /vars.php/extra/pa%20th?a=1&b=%2F HTTP/1.1\r\nHost: example.com:8080\r\nCookie: c=1\r\n\
         X-Multi: 1\r\nProxy: http://evil.example\r\nX_Under: u\r\nCookie: d=2\r\nx-multi: 2\r\n\
         Authorization: Basic dXNlcjpwYXNz\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", body(&r));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let t = body(&r);
    let f = |k: &str| json_field(&t, k);
    assert_eq!(f("SCRIPT_NAME").as_deref(), Some("/vars.php"));
    assert_eq!(f("SCRIPT_FILENAME"), Some(format!("{}/vars.php", root.display())));
    assert_eq!(f("PATH_INFO").as_deref(), Some("/extra/pa th"));
    assert_eq!(f("PATH_TRANSLATED"), Some(format!("{}/extra/pa th", root.display())));
    assert_eq!(f("DOCUMENT_ROOT"), Some(root.display().to_string()));
    assert_eq!(f("PHP_SELF").as_deref(), Some("/vars.php/extra/pa th"));
    assert_eq!(f("QUERY_STRING").as_deref(), Some("a=1&b=%2F"));
    assert_eq!(f("REQUEST_URI").as_deref(), Some("/vars.php/extra/pa%20th?a=1&b=%2F"));
    assert_eq!(f("REQUEST_METHOD").as_deref(), Some("GET"));
    assert_eq!((f("SERVER_NAME").as_deref(), f("SERVER_PORT").as_deref()), (Some("example.com"), Some("8080")));
    assert_eq!(f("SERVER_PROTOCOL").as_deref(), Some("HTTP/1.1"));
    assert_eq!(f("GATEWAY_INTERFACE").as_deref(), Some("CGI/1.1"));
    assert!(f("SERVER_SOFTWARE").unwrap().starts_with("selvedge/"));
    assert_eq!(f("REMOTE_ADDR").as_deref(), Some("127.0.0.1"));
    assert!(f("REMOTE_PORT").is_some_and(|p| p.parse::<u16>().is_ok()));
    assert_eq!((f("REQUEST_SCHEME").as_deref(), f("HTTPS")), (Some("http"), None));
    assert_eq!(f("HTTP_COOKIE").as_deref(), Some("c=1; d=2"));
    assert!(t.contains(r#""COOKIE":{"c":"1","d":"2"}"#), "{t}");
    assert_eq!(f("HTTP_X_MULTI").as_deref(), Some("1, 2"));
    assert!(t.contains(r#""GET":{"a":"1","b":"\/"}"#), "{t}");
    // httpoxy: a `Proxy` field never becomes HTTP_PROXY; names with `_` are dropped.
    assert_eq!((f("HTTP_PROXY"), f("HTTP_X_UNDER")), (None, None));
    // Basic credentials reach PHP (pass_authorization is on for FastCGI).
    assert_eq!((f("PHP_AUTH_USER").as_deref(), f("PHP_AUTH_PW").as_deref()), (Some("user"), Some("pass")));
    assert_eq!(f("APP_ENV").as_deref(), Some("test"));
    assert_eq!(f("REDIRECT_STATUS").as_deref(), Some("200"));

    // A form POST: CONTENT_TYPE/CONTENT_LENGTH, parsed by PHP into $_POST.
    let form = "x=1&y=two";
    let r = request(
        s.addr,
        &format!(
            "POST /vars.php HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    let t = body(&r);
    assert_eq!(json_field(&t, "CONTENT_LENGTH").as_deref(), Some("9"));
    assert_eq!(json_field(&t, "CONTENT_TYPE").as_deref(), Some("application/x-www-form-urlencoded"));
    assert!(t.contains(r#""POST":{"x":"1","y":"two"}"#), "{t}");

    // HTTP/2: the protocol and the :authority as HTTP_HOST.
    let (_, out) = curl(&["--http2-prior-knowledge", &format!("http://{}/vars.php?h2", s.addr)]);
    let t = String::from_utf8(out).unwrap();
    assert_eq!(json_field(&t, "SERVER_PROTOCOL").as_deref(), Some("HTTP/2.0"));
    assert_eq!(json_field(&t, "HTTP_HOST"), Some(s.addr.to_string()));
    assert_eq!(json_field(&t, "QUERY_STRING").as_deref(), Some("h2"));
}

#[test]
fn client_address_from_a_trusted_proxy() {
    let d = TempDir::new("fastcgi-client");
    d.write("root/vars.php", VARS_PHP);
    let fpm = Fpm::start(&d, 1);
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nfastcgi = {{ address = \"unix:{sock}\", root = \"root\" }}\n",
            sock = fpm.sock.display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    // From a trusted peer: the rightmost untrusted forwarded address, without a port (the
    // peer's port is not the client's).
    let r = request(
        s.addr,
        "GET /vars.php HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 203.0.113.9, 198.51.100.23, 127.0.0.1\r\n\
         Connection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", body(&r));
    let t = body(&r);
    assert_eq!(
        (json_field(&t, "REMOTE_ADDR").as_deref(), json_field(&t, "REMOTE_PORT")),
        (Some("198.51.100.23"), None)
    );
    // Without forwarding fields the peer is the client, with its port.
    let r = request(s.addr, "GET /vars.php HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let t = body(&r);
    assert_eq!(json_field(&t, "REMOTE_ADDR").as_deref(), Some("127.0.0.1"));
    assert!(json_field(&t, "REMOTE_PORT").is_some_and(|p| p.parse::<u16>().is_ok()), "{t}");
}

#[test]
fn five_megabyte_upload_h1_and_h2() {
    let (d, _fpm, s) = start(2, 1, ", max_buffered_input = \"64KiB\"");
    let data: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let file = d.write("upload.bin", &data);
    let sha = {
        let o = Command::new("sha256sum").arg(&file).output().unwrap();
        String::from_utf8(o.stdout).unwrap().split(' ').next().unwrap().to_string()
    };
    let want = format!("{} {sha}\n", data.len());
    let url = format!("http://{}/upload.php", s.addr);
    let at = format!("@{}", file.display());
    // HTTP/1.1 with a length, streamed to PHP as it comes.
    let (_, out) = curl(&["--data-binary", &at, "-H", "Content-Type: application/octet-stream", &url]);
    assert_eq!(String::from_utf8(out).unwrap(), want);
    // HTTP/2 with a length.
    let (_, out) =
        curl(&["--http2-prior-knowledge", "--data-binary", &at, "-H", "Content-Type: application/octet-stream", &url]);
    assert_eq!(String::from_utf8(out).unwrap(), want);
    // Chunked (no length): read first, up to max_buffered_input; beyond, 411.
    let (_, out) = curl(&["-H", "Transfer-Encoding: chunked", "--data-binary", "small body", &url]);
    assert_eq!(String::from_utf8(out).unwrap().split(' ').next(), Some("10"));
    let (_, out) = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        &at,
        &url,
    ]);
    assert_eq!(String::from_utf8(out).unwrap(), "411");
    // The connections went back to the pool: a plain request still works.
    assert_eq!(s.get("/answers.php").status, 200);
}

#[test]
fn flushed_output_streams_before_the_script_ends() {
    let (_d, _fpm, s) = start(2, 1, "");
    let mut c = connect(s.addr);
    let t0 = Instant::now();
    c.write_all(b"GET /stream.php HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut first_at = None;
    loop {
        let n = c.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if first_at.is_none() && got.windows(6).any(|w| w == b"first\n") {
            first_at = Some(t0.elapsed());
        }
    }
    let total = t0.elapsed();
    let first_at = first_at.expect("the first part");
    assert!(first_at < Duration::from_millis(800), "first part after {first_at:?}");
    assert!(total >= Duration::from_secs(1), "{total:?}");
    let r = common::parse(&got, true).unwrap();
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(body(&r), "first\nsecond\n");
    // Over HTTP/2 too.
    let (_, out) = curl(&["--http2-prior-knowledge", &format!("http://{}/stream.php", s.addr)]);
    assert_eq!(out, b"first\nsecond\n");
}

#[test]
fn answers_errors_and_logs() {
    let (_d, _fpm, s) = start(2, 1, ", timeout = \"1s\"");
    let r = s.get("/answers.php?q=404");
    assert_eq!((r.status, body(&r).as_str()), (404, "nope\n"));
    let r = s.get("/answers.php?q=redirect");
    assert_eq!((r.status, r.header("location")), (302, Some("/elsewhere")));
    let r = s.get("/answers.php?q=created");
    assert_eq!((r.status, r.header("location"), body(&r).as_str()), (201, Some("http://example.com/new"), "made\n"));
    let r = s.get("/answers.php?q=cookies");
    let cookies: Vec<_> = r.headers.iter().filter(|(n, _)| n == "set-cookie").map(|(_, v)| v.as_str()).collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    let r = s.get("/answers.php?q=length");
    assert_eq!((r.header("content-length"), r.body.as_slice()), (Some("5"), &b"hello"[..]));
    let r = s.get("/answers.php?q=big");
    assert_eq!((r.status, body(&r).len()), (200, 16 << 16));
    assert!(body(&r).starts_with("0123456789abcdef0123"));
    // HEAD: the head only (PHP still runs the script; its output is read and dropped).
    let r = request(s.addr, "HEAD /answers.php?q=length HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.header("content-length"), r.body.len()), (200, Some("5"), 0));

    // A script error is PHP's 500, and its message reaches the error log.
    let r = s.get("/answers.php?q=fatal");
    assert_eq!(r.status, 500);
    eventually(5, "the fatal error in the log", || {
        log_has(&s, "PHP Fatal error") && log_has(&s, "undefined_function_for_the_test")
    });
    assert!(log_has(&s, "/answers.php"), "log lines name the script");
    let r = s.get("/syntax.php");
    assert_eq!(r.status, 500);
    eventually(5, "the parse error in the log", || log_has(&s, "PHP Parse error"));
    // A warning goes to the log; the page is still served.
    let r = s.get("/answers.php?q=warn");
    assert_eq!((r.status, body(&r).as_str()), (200, "warned\n"));
    eventually(5, "error_log() in the log", || log_has(&s, "a line for the error log"));
    // No progress within `timeout`: 504, and the next request still works.
    let t0 = Instant::now();
    assert_eq!(s.get("/answers.php?q=slow").status, 504);
    assert!(t0.elapsed() < Duration::from_millis(2500), "{:?}", t0.elapsed());
    assert_eq!(s.get("/answers.php").status, 200);
}

#[test]
fn application_down_is_502() {
    let (d, fpm, s) = start(1, 1, ", connect_timeout = \"1s\"");
    assert_eq!(s.get("/answers.php").status, 200);
    drop(fpm);
    eventually(5, "php-fpm gone", || !d.path().join("fpm.sock").exists());
    let r = s.get("/answers.php");
    assert_eq!(r.status, 502);
    eventually(5, "the failure in the log", || log_has(&s, "cannot connect"));
    // A socket that accepts and closes at once: 502 too.
    let _ = std::fs::remove_file(d.path().join("fpm.sock"));
    let l = std::os::unix::net::UnixListener::bind(d.path().join("fpm.sock")).unwrap();
    let t = std::thread::spawn(move || {
        for c in l.incoming().take(2) {
            drop(c);
        }
    });
    assert_eq!(s.get("/answers.php").status, 502);
    assert_eq!(s.get("/answers.php").status, 502);
    t.join().unwrap();
}

#[test]
fn path_safety() {
    let (_d, _fpm, s) = start(2, 1, "");
    let code = |p: &str| s.get(p).status;
    for p in [
        "/../outside.php",
        "/%2e%2e/outside.php",
        "/docs/%2E%2E/%2E%2E/vars.php",
        "/dir.php%2Finner.php",
        "/vars.php%00.jpg",
        "/a%5c..%5cvars.php",
    ] {
        assert_eq!(code(p), 400, "{p}");
    }
    // Dot-segments inside the root resolve (RFC 3986 §5.2.4) before the script is chosen.
    assert_eq!(code("/docs/%2E%2E/vars.php"), code("/vars.php"));
    // An uploaded file is never run as PHP, whatever follows it in the path.
    assert_eq!(code("/uploads/avatar.jpg/x.php"), 403);
    assert_eq!(code("/uploads/avatar.jpg"), 403);
    // A non-script file's source is never served.
    assert_eq!(code("/secret.inc"), 403);
    assert_eq!(code("/.hidden.php"), 404);
    assert_eq!(code("/escape.php"), 404);
    assert_eq!(code("/missing.php"), 404);
    assert_eq!(code("/missing.php/x"), 404);
    // A directory named like a script is a directory.
    let r = s.get("/dir.php/inner.php/more");
    assert_eq!((r.status, body(&r).as_str()), (200, "inner /dir.php/inner.php|/more"));
    assert_eq!(code("/dir.php/"), 404);
    // Directories: their index, after a redirect to the slash form.
    let r = s.get("/docs?x=1");
    assert_eq!((r.status, r.header("location")), (301, Some("/docs/?x=1")));
    assert_eq!(body(&s.get("/docs/")), "docs index");
    assert_eq!(body(&s.get("/")), "index of /index.php");
}

#[test]
fn script_lookups_are_remembered_for_script_cache() {
    // One worker, so every request sees the same remembered lookups.
    let (d, _fpm, s) = start(2, 1, ", script_cache = \"1500ms\"");
    let code = |p: &str| s.get(p).status;
    assert_eq!(code("/late.php"), 404);
    d.write("root/late.php", "<?php echo 'late';\n");
    // Within script_cache the worker still knows the path as missing: no walk on disk.
    assert_eq!(code("/late.php"), 404);
    std::thread::sleep(Duration::from_millis(1800));
    let r = s.get("/late.php");
    assert_eq!((r.status, body(&r).as_str()), (200, "late"));
    // A removed script: remembered as found, then missing (PHP answers for the file it
    // cannot open meanwhile, with its own 404).
    std::fs::remove_file(d.path().join("root/late.php")).unwrap();
    std::thread::sleep(Duration::from_millis(1800));
    assert_eq!(code("/late.php"), 404);

    // script_cache = "0s": every request walks the path.
    let (d, _fpm, s) = start(2, 1, ", script_cache = \"0s\"");
    assert_eq!(s.get("/late.php").status, 404);
    d.write("root/late.php", "<?php echo 'late';\n");
    let r = s.get("/late.php");
    assert_eq!((r.status, body(&r).as_str()), (200, "late"));
}

/// The pid of the php-fpm worker that served a request.
fn pid_of(s: &Srv) -> String {
    let r = s.get("/answers.php?q=pid");
    assert_eq!(r.status, 200);
    body(&r)
}

/// The server's open sockets (listeners, clients, application connections).
fn sockets(srv: &Srv) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", srv.pid()))
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:")))
        .count()
}

#[test]
fn connections_are_kept_and_reused() {
    // One worker: every request goes over the same kept connection, so the same php-fpm
    // process serves them all (of four).
    let (_d, _fpm, s) = start(4, 1, "");
    let pids: Vec<String> = (0..20).map(|_| pid_of(&s)).collect();
    assert!(pids.iter().all(|p| *p == pids[0]), "{pids:?}");
    // max_idle = 0: no FCGI_KEEP_CONN, a connection per request.
    let (_d2, _fpm2, s2) = start(4, 1, ", max_idle = 0");
    let pids: Vec<String> = (0..20).map(|_| pid_of(&s2)).collect();
    assert!(pids.iter().all(|p| !p.is_empty()));
    // The pooled server holds one more socket than the other: its idle connection.
    eventually(5, "one idle connection more", || sockets(&s) == sockets(&s2) + 1);
}

#[test]
fn idle_connections_are_released_to_other_workers() {
    // One php-fpm process, two selvedge workers, a long keep-alive: a connection kept idle
    // by one worker holds the only process. Requests on fresh client connections land on
    // both workers; each must be answered at once, not after the other's keepalive.
    // A request waiting on the held process would end with the route's 504.
    let (_d, _fpm, s) = start(1, 2, ", keepalive_timeout = \"60s\", timeout = \"10s\"");
    let t0 = Instant::now();
    for i in 0..16 {
        let r = s.get("/answers.php?q=pid");
        assert_eq!(r.status, 200, "request {i} after {:?}", t0.elapsed());
    }
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
}

/// `n` requests at once (each on its own client connection), with their statuses, bodies
/// and the time they all took.
fn parallel(s: &Srv, path: &str, n: usize) -> (Vec<(u16, String)>, Duration) {
    let t0 = Instant::now();
    let addr = s.addr;
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let path = path.to_string();
            std::thread::spawn(move || {
                let r = request(addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
                (r.status, body(&r))
            })
        })
        .collect();
    let out = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (out, t0.elapsed())
}

#[test]
fn more_requests_than_application_processes() {
    // Two php-fpm processes, eight requests at once: six connections wait in php-fpm's
    // backlog. A finished connection must not be kept (it would hold a process they need):
    // all are answered, two at a time.
    // (A request waiting on a kept process would end with the route's 504.)
    let (_d, _fpm, s) = start(2, 1, ", timeout = \"10s\"");
    let (out, took) = parallel(&s, "/answers.php?q=nap", 8);
    assert!(out.iter().all(|(st, _)| *st == 200), "{out:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    // Once the load is within the processes, connections are kept again.
    let pids: Vec<String> = (0..10).map(|_| pid_of(&s)).collect();
    assert!(pids.iter().all(|p| *p == pids[9]), "{pids:?}");
}

#[test]
fn max_connections_queues_requests_in_the_server() {
    // At most two connections: eight requests at once wait for one to be given back (not
    // for connect_timeout), and the two are reused throughout.
    let (_d, _fpm, s) = start(4, 1, ", max_connections = 2, connect_timeout = \"1s\"");
    let (out, took) = parallel(&s, "/answers.php?q=nap", 8);
    assert!(out.iter().all(|(st, _)| *st == 200), "{out:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let pids: std::collections::HashSet<&str> = out.iter().map(|(_, b)| b.as_str()).collect();
    assert!(pids.len() <= 2, "{pids:?}");
}

#[test]
fn idle_connections_expire() {
    let (_d, _fpm, s) = start(1, 1, ", keepalive_timeout = \"1s\"");
    // A request that never reaches the application: the workers are set up after it
    // (each holds copies of the listening socket).
    assert_eq!(s.get("/%2e%2e/x.php").status, 400);
    // The count once it holds still.
    let settling = Instant::now();
    let before = loop {
        let n = sockets(&s);
        std::thread::sleep(Duration::from_millis(300));
        if sockets(&s) == n {
            break n;
        }
        assert!(settling.elapsed() < Duration::from_secs(10), "the socket count never settled");
    };
    assert_eq!(s.get("/answers.php").status, 200);
    eventually(5, "the idle connection kept", || sockets(&s) == before + 1);
    // It closes on its own, without another request.
    eventually(5, "the idle connection closed", || sockets(&s) == before);
}

#[test]
fn config_errors_point_at_the_route() {
    let d = TempDir::new("fastcgi-cfg");
    std::fs::create_dir_all(d.path().join("root")).unwrap();
    let cfg = d.write(
        "bad.toml",
        "[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nfastcgi = { address = \"unix:relative.sock\", root = \"root\" }\n",
    );
    let out = Command::new(common::BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad.toml:6:") && err.contains("absolute path"), "{err}");
    let _: &Path = d.path();
}

/// A static route over a FastCGI route's directory (`/` serves `www`, `/app` runs PHP from
/// `www/app`): every spelling of a script's path runs it through `/app`, and a link into
/// `www/app` from elsewhere in `www` serves nothing; the source never leaves the server
/// (`//app/config.php` used to be served by `/` as text).
#[test]
fn php_source_is_never_served_by_a_static_route_over_it() {
    let d = TempDir::new("fastcgi-overlap");
    d.write("www/index.html", "home");
    d.write("www/app/config.php", "<?php $db_password = 'hunter2'; echo 'config ran';\n");
    std::os::unix::fs::symlink(d.path().join("www/app"), d.path().join("www/app-link")).unwrap();
    let fpm = Fpm::start(&d, 2);
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"www\"\n\
             [[vhost.route]]\npath = \"/app\"\nfastcgi = {{ address = \"unix:{sock}\", root = \"www/app\" }}\n",
            sock = fpm.sock.display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    for t in ["/app/config.php", "//app/config.php", "/%61pp/config.php", "/x/../app/config.php", "/./app//config.php"]
    {
        let r = s.get(t);
        assert!(!r.text().contains("hunter2"), "{t}: the source: {:?}", r.text());
        assert_eq!((r.status, r.text().contains("config ran")), (200, true), "{t}: {:?}", r.text());
    }
    let r = s.get("/app-link/config.php");
    assert_eq!(r.status, 404, "{:?}", r.text());
    assert!(!r.text().contains("hunter2"));
}
