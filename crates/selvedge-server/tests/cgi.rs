//! CGI/1.1 routes with real scripts (`/bin/sh` and Python) run by the real binary: the
//! meta-variables, bodies both ways, Status/Location and local redirects, the failure
//! answers (502/504), streaming, a client leaving mid-stream (the script's whole process
//! group is killed), HTTP/2 and TLS, and no zombie or leftover processes.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{connect, eventually, free_port, request, Resp, Srv, TempDir};

/// The route's `cgi` table used by most tests: a short time limit.
const CGI: &str = "dir = \"cgi\", timeout = 1.5, max_buffered_input = 100000, max_local_redirects = 3, \
                   interpreters = { shx = \"/bin/sh\" }, env = [\"HOME\", \"FIXED=yes\"]";

const ENV_PY: &str = r#"#!/usr/bin/env python3
import os, sys
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
out = ["Content-Type: text/plain", ""]
out += ["%s=%s" % (k, os.environ[k]) for k in sorted(os.environ)]
for fd in fds:
    try:
        out.append("FD_%d=%s" % (fd, os.readlink("/proc/self/fd/%d" % fd)))
    except OSError:
        pass
body = sys.stdin.buffer.read()
out.append("STDIN=%d" % len(body))
sys.stdout.write("\n".join(out) + "\n")
"#;

/// Copies stdin to stdout as it comes (writing before reading it all), with a length when
/// the query asks for one.
const ECHO_PY: &str = r#"#!/usr/bin/env python3
import os, sys
n = int(os.environ.get("CONTENT_LENGTH", "0"))
out = sys.stdout.buffer
out.write(b"Content-Type: application/octet-stream\r\n")
if os.environ["QUERY_STRING"] == "len":
    out.write(b"Content-Length: %d\r\n" % n)
out.write(b"\r\n")
out.flush()
inp = sys.stdin.buffer
while n > 0:
    chunk = inp.read1(min(n, 65536))
    if not chunk:
        break
    out.write(chunk)
    out.flush()
    n -= len(chunk)
"#;

const ANSWERS_SH: &str = r#"#!/bin/sh
case "$QUERY_STRING" in
  404) printf 'Status: 404 Not Found\nContent-Type: text/plain\n\nnope\n' ;;
  abs) printf 'Location: http://example.com/x\n\n' ;;
  see) printf 'Status: 303 See Other\r\nLocation: http://example.com/y\r\nContent-Type: text/plain\r\n\r\nsee y\n' ;;
  local) printf 'Location: /cgi/target.sh/from?x=1\n\n' ;;
  static) printf 'Location: /hello.txt\n\n' ;;
  loop) printf 'Location: /cgi/answers.sh?loop\n\n' ;;
  bad) printf 'this is not a header\n\nbody\n' ;;
  big) printf 'X-Big: '; head -c 100000 /dev/zero | tr '\0' a; printf '\n\n' ;;
  cl) printf 'Content-Length: 5\nX-Extra: 1\nTransfer-Encoding: gzip\n\nhelloEXTRA' ;;
  short) printf 'Content-Length: 10\n\nhi' ;;
  cookies) printf 'Set-Cookie: a=1\nSet-Cookie: b=2\nContent-Type: text/plain\n\nok' ;;
  *) printf 'Content-Type: text/plain\n\ndefault\n' ;;
esac
"#;

const TARGET_SH: &str = "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\n\
                         echo \"$REQUEST_METHOD $SCRIPT_NAME $PATH_INFO $QUERY_STRING $REMOTE_ADDR ${CONTENT_LENGTH-none}\"\n";

/// Writes an executable script.
fn script(d: &TempDir, rel: &str, text: &str) {
    let p = d.write(rel, text);
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A site with the test scripts under `/cgi` (`cgi_table`) and static files at `/`.
fn start(cgi_table: &str) -> (TempDir, Srv) {
    let d = TempDir::new("cgi");
    d.write("site/hello.txt", "hello static\n");
    script(&d, "cgi/env.py", ENV_PY);
    script(&d, "cgi/echo.py", ECHO_PY);
    script(&d, "cgi/answers.sh", ANSWERS_SH);
    script(&d, "cgi/target.sh", TARGET_SH);
    script(
        &d,
        "cgi/sub/deep.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n%s|%s' \"$SCRIPT_NAME\" \"$PATH_INFO\"\n",
    );
    script(&d, "cgi/fail.sh", "#!/bin/sh\necho 'oops, failing' >&2\nexit 3\n");
    script(&d, "cgi/stall.sh", "#!/bin/sh\necho $$ > stall.pid\nsleep 30 &\necho $! > stall-child.pid\nwait\n");
    script(&d, "cgi/halfhead.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n'\nexec sleep 30\n");
    script(
        &d,
        "cgi/slow.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nfor i in 0 1 2 3 4; do echo \"tick $i\"; sleep 0.3; done\n",
    );
    script(
        &d,
        "cgi/forever.sh",
        "#!/bin/sh\necho $$ > forever.pid\nprintf 'Content-Type: text/plain\\n\\n'\n\
         while :; do echo tick; sleep 0.1; done\n",
    );
    script(
        &d,
        "cgi/marker.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nbody\\n'\nsleep 0.3\necho done > marker.txt\n",
    );
    d.write("cgi/source.txt", "not executable\n");
    d.write("cgi/mapped.shx", "printf 'Content-Type: text/plain\\n\\nrun by /bin/sh\\n'\n");
    script(&d, "cgi/.hidden.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nhidden\\n'\n");
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/cgi\"\ncgi = {{ {cgi_table} }}\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
        ),
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    (d, srv)
}

/// `(state, ppid, pgrp)` of a process, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(char, u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut f = s[s.rfind(')')? + 2..].split(' ');
    let state = f.next()?.chars().next()?;
    Some((state, f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// The server's child processes (any state).
fn children(srv: &Srv) -> Vec<(u32, char)> {
    pids().into_iter().filter_map(|p| stat(p).filter(|s| s.1 == srv.pid()).map(|s| (p, s.0))).collect()
}

/// Live (not zombie) processes of process group `pgid`.
fn group_alive(pgid: u32) -> Vec<u32> {
    pids().into_iter().filter(|&p| stat(p).is_some_and(|s| s.2 == pgid && s.0 != 'Z')).collect()
}

/// Every script of the server has exited and been reaped.
fn no_children_left(srv: &Srv) {
    eventually(10, "no child processes of the server (running or zombie)", || children(srv).is_empty());
}

fn read_pid(path: &Path) -> u32 {
    let mut pid = None;
    eventually(5, "pid file", || {
        pid = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

fn log_has(srv: &Srv, what: &str) -> bool {
    srv.stderr.lock().unwrap().iter().any(|l| l.contains(what))
}

/// `curl -sS` with the response head on stdout and the body in `out`.
fn curl(args: &[&str], out: &Path) -> (u16, Vec<(String, String)>) {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-H", "Expect:", "-D", "-", "-o", out.to_str().unwrap()])
        .args(args)
        .output()
        .expect("curl");
    assert!(o.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let head = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers)
}

fn hval<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The `NAME=value` lines of env.py's output.
fn vars(text: &str) -> std::collections::HashMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn meta_variables() {
    let (d, s) = start(CGI);
    let r = dechunked(s.get_h(
        "/cgi/env.py/extra/pa%20th/?a=1&b=%2F",
        &[
            ("X-Custom", "v1"),
            ("x-custom", "v2"),
            ("Cookie", "a=1"),
            ("Cookie", "b=2"),
            ("Proxy", "http://evil.example:1/"),
            ("X_Underscore", "spoof"),
            ("Authorization", "Basic c2VjcmV0"),
        ],
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let v = vars(&r.text());
    let dir = d.path().join("cgi").canonicalize().unwrap();
    let want = [
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", "/cgi/env.py"),
        ("PATH_INFO", "/extra/pa th/"),
        ("QUERY_STRING", "a=1&b=%2F"),
        ("REQUEST_URI", "/cgi/env.py/extra/pa%20th/?a=1&b=%2F"),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
        ("SERVER_NAME", "t"),
        ("SERVER_PORT", "80"),
        ("REQUEST_SCHEME", "http"),
        ("REMOTE_ADDR", "127.0.0.1"),
        ("HTTP_HOST", "t"),
        ("HTTP_X_CUSTOM", "v1, v2"),
        ("HTTP_COOKIE", "a=1; b=2"),
        ("HTTP_CONNECTION", "close"),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("FIXED", "yes"),
        ("STDIN", "0"),
    ];
    for (k, val) in want {
        assert_eq!(v.get(k).map(String::as_str), Some(val), "{k} in {v:?}");
    }
    assert_eq!(v["DOCUMENT_ROOT"], dir.to_str().unwrap());
    assert_eq!(v["SCRIPT_FILENAME"], dir.join("env.py").to_str().unwrap());
    assert_eq!(v["PATH_TRANSLATED"], format!("{}/extra/pa th/", dir.display()));
    assert_eq!(v.get("HOME"), std::env::var("HOME").ok().as_ref());
    assert!(v["SERVER_SOFTWARE"].starts_with("selvedge/"));
    assert!(v["REMOTE_PORT"].parse::<u16>().is_ok());
    // httpoxy, spoofable names, credentials, and no body: absent.
    for k in ["HTTP_PROXY", "HTTP_X_UNDERSCORE", "HTTP_AUTHORIZATION", "HTTPS", "CONTENT_LENGTH", "CONTENT_TYPE"] {
        assert!(!v.contains_key(k), "{k} in {v:?}");
    }
    // No descriptor of the server's own beyond stdin/stdout/stderr (what the test process
    // itself inherited and passed on is not the server's doing).
    for (k, target) in v.iter().filter(|(k, _)| k.starts_with("FD_")) {
        let fd: u32 = k[3..].parse().unwrap();
        let ours = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        assert!(fd <= 2 || ours.is_some_and(|o| o.to_str() == Some(target.as_str())), "{k}={target} leaked");
    }
    // Nothing of the server's environment but what the route lists (Python itself adds
    // LC_CTYPE in a C locale).
    let allowed = ["HOME", "FIXED", "PATH", "STDIN", "REDIRECT_STATUS", "PATH_TRANSLATED", "LC_CTYPE"];
    for k in v.keys().filter(|k| !k.starts_with("FD_")) {
        let meta = k.starts_with("HTTP_")
            || k.starts_with("SERVER_")
            || k.starts_with("REQUEST_")
            || k.starts_with("REMOTE_")
            || k.starts_with("SCRIPT_")
            || ["GATEWAY_INTERFACE", "PATH_INFO", "QUERY_STRING", "DOCUMENT_ROOT"].contains(&k.as_str());
        assert!(meta || allowed.contains(&k.as_str()), "unexpected variable {k}");
    }

    // A POST: CONTENT_LENGTH / CONTENT_TYPE, the body on stdin.
    let r = dechunked(request(
        s.addr,
        "POST /cgi/env.py HTTP/1.1\r\nHost: example.com:8080\r\nContent-Type: text/x-test\r\n\
         Content-Length: 5\r\nConnection: close\r\n\r\nhello",
    ));
    let v = vars(&r.text());
    assert_eq!((v["REQUEST_METHOD"].as_str(), v["CONTENT_LENGTH"].as_str()), ("POST", "5"));
    assert_eq!((v["CONTENT_TYPE"].as_str(), v["STDIN"].as_str()), ("text/x-test", "5"));
    assert_eq!((v["SERVER_NAME"].as_str(), v["SERVER_PORT"].as_str()), ("example.com", "8080"));
    assert!(!v.contains_key("PATH_INFO"));

    // A chunked body (no length): read first, CONTENT_LENGTH computed; over the limit, 411.
    let body = d.write("small.bin", vec![b'x'; 50_000]);
    let out = d.path().join("out");
    let (st, _) = curl(
        &[
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &format!("@{}", body.display()),
            &url(&s, "/cgi/env.py"),
        ],
        &out,
    );
    let v = vars(&std::fs::read_to_string(&out).unwrap());
    assert_eq!((st, v["CONTENT_LENGTH"].as_str(), v["STDIN"].as_str()), (200, "50000", "50000"));
    let big = d.write("big.bin", vec![b'x'; 150_000]);
    let (st, _) = curl(
        &["-H", "Transfer-Encoding: chunked", "--data-binary", &format!("@{}", big.display()), &url(&s, "/cgi/env.py")],
        &out,
    );
    assert_eq!(st, 411);
    no_children_left(&s);
}

/// `GET path` with the body de-chunked (scripts without a length are streamed chunked).
fn get(s: &Srv, path: &str) -> Resp {
    dechunked(s.get(path))
}

fn dechunked(mut r: Resp) -> Resp {
    if r.header("transfer-encoding") == Some("chunked") {
        r.body = dechunk(&r.body).unwrap_or_else(|| panic!("bad chunked body {:?}", r.text()));
    }
    r
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).ok()?, 16).ok()?;
        b = &b[eol + 2..];
        if n == 0 {
            return (b == b"\r\n").then_some(out);
        }
        out.extend_from_slice(b.get(..n)?);
        b = b.get(n..)?.strip_prefix(b"\r\n")?;
    }
}

fn url(s: &Srv, path: &str) -> String {
    format!("http://{}{path}", s.addr)
}

#[test]
fn script_lookup_and_path_safety() {
    let (_d, s) = start(CGI);
    assert_eq!(get(&s, "/cgi/sub/deep.sh/x/y").text(), "/cgi/sub/deep.sh|/x/y");
    // The script sees the one normalized spelling of the path its route was chosen on.
    assert_eq!(get(&s, "/cgi//sub/deep.sh").text(), "/cgi/sub/deep.sh|");
    assert_eq!(get(&s, "/cgi/x/../%73ub/./deep.sh/a//b").text(), "/cgi/sub/deep.sh|/a/b");
    assert_eq!(get(&s, "/cgi/mapped.shx").text(), "run by /bin/sh\n");
    assert_eq!(get(&s, "/cgi/source.txt").status, 403);
    assert_eq!(get(&s, "/cgi/.hidden.sh").status, 404);
    assert_eq!(get(&s, "/cgi/missing.sh").status, 404);
    assert_eq!(get(&s, "/cgi/sub/").status, 404);
    assert_eq!(get(&s, "/cgi/sub/..%2F..%2Fsite/hello.txt").status, 400);
    // Dot-segments resolve before routing: this is /site/hello.txt, which no route has.
    assert_eq!(get(&s, "/cgi/%2e%2e/site/hello.txt").status, 404);
    assert_eq!(get(&s, "/cgi/%2e%2e/%2e%2e/x").status, 400);
    assert_eq!(get(&s, "/hello.txt").text(), "hello static\n");
    no_children_left(&s);
}

#[test]
fn one_megabyte_both_ways() {
    let (d, s) = start(CGI);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let input = d.write("in.bin", &data);
    let out = d.path().join("out.bin");
    let at = format!("@{}", input.display());
    // Streamed back as it is read (the script writes before it has read everything):
    // chunked, no length.
    let (st, h) = curl(&["--data-binary", &at, &url(&s, "/cgi/echo.py")], &out);
    assert_eq!((st, hval(&h, "transfer-encoding"), hval(&h, "content-length")), (200, Some("chunked"), None));
    assert!(std::fs::read(&out).unwrap() == data, "streamed echo differs");
    // With the script's Content-Length (within max_buffered_output): sent with it.
    let (st, h) = curl(&["--data-binary", &at, &url(&s, "/cgi/echo.py?len")], &out);
    assert_eq!((st, hval(&h, "content-length"), hval(&h, "transfer-encoding")), (200, Some("1000000"), None));
    assert!(std::fs::read(&out).unwrap() == data, "sized echo differs");
    // Over HTTP/2 (h2c, prior knowledge).
    let (st, _) = curl(&["--http2-prior-knowledge", "--data-binary", &at, &url(&s, "/cgi/echo.py")], &out);
    assert_eq!(st, 200);
    assert!(std::fs::read(&out).unwrap() == data, "h2 echo differs");
    no_children_left(&s);
}

#[test]
fn status_location_and_local_redirects() {
    let (_d, s) = start(CGI);
    let r = get(&s, "/cgi/answers.sh?404");
    assert_eq!((r.status, r.text().as_str(), r.header("content-type")), (404, "nope\n", Some("text/plain")));
    let r = get(&s, "/cgi/answers.sh?abs");
    assert_eq!((r.status, r.header("location")), (302, Some("http://example.com/x")));
    let r = get(&s, "/cgi/answers.sh?see");
    assert_eq!((r.status, r.header("location"), r.text().as_str()), (303, Some("http://example.com/y"), "see y\n"));
    // Content-Length honoured: the extra bytes dropped, hop-by-hop fields not copied.
    let r = get(&s, "/cgi/answers.sh?cl");
    assert_eq!((r.status, r.text().as_str(), r.header("content-length")), (200, "hello", Some("5")));
    assert_eq!((r.header("x-extra"), r.header("transfer-encoding")), (Some("1"), None));
    let r = get(&s, "/cgi/answers.sh?cookies");
    let cookies: Vec<_> = r.headers.iter().filter(|(n, _)| n == "set-cookie").map(|(_, v)| v.as_str()).collect();
    assert_eq!(cookies, ["a=1", "b=2"]);

    // Local redirects: routed again as a GET, without the body, keeping the client's address.
    let r = get(&s, "/cgi/answers.sh?local");
    assert_eq!((r.status, r.text().as_str()), (200, "GET /cgi/target.sh /from x=1 127.0.0.1 none\n"));
    assert_eq!(r.header("location"), None);
    let r = dechunked(request(
        s.addr,
        "POST /cgi/answers.sh?local HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    ));
    assert_eq!(r.text(), "GET /cgi/target.sh /from x=1 127.0.0.1 none\n");
    let r = get(&s, "/cgi/answers.sh?static");
    assert_eq!((r.status, r.text().as_str()), (200, "hello static\n"));
    // A loop stops after max_local_redirects (3).
    let r = get(&s, "/cgi/answers.sh?loop");
    assert_eq!(r.status, 500);
    eventually(5, "the loop logged", || log_has(&s, "more than 3 local redirects"));
    no_children_left(&s);
}

#[test]
fn failing_scripts_give_502() {
    // A time limit far from the script's exit: a 502 at once is the failure, not the limit.
    let (_d, s) = start(&format!("{}, max_output_head = 8192", CGI.replace("timeout = 1.5", "timeout = 10")));
    let t = Instant::now();
    let r = get(&s, "/cgi/fail.sh");
    assert_eq!(r.status, 502);
    assert!(t.elapsed() < Duration::from_secs(5), "not the time limit: {:?}", t.elapsed());
    eventually(5, "stderr logged with the script's name", || log_has(&s, "WARN cgi /cgi/fail.sh: oops, failing"));
    eventually(5, "exit status logged", || log_has(&s, "cgi /cgi/fail.sh: exit status: 3"));
    for (q, why) in [("bad", "a line without ':'"), ("big", "over the limit"), ("short", "output ended early")] {
        let r = get(&s, &format!("/cgi/answers.sh?{q}"));
        assert_eq!(r.status, 502, "{q}");
        eventually(5, &format!("{q}: {why} logged"), || log_has(&s, why));
    }
    no_children_left(&s);
}

#[test]
fn silent_scripts_give_504_and_are_killed() {
    let (d, s) = start(CGI);
    for path in ["/cgi/stall.sh", "/cgi/halfhead.sh"] {
        let t = Instant::now();
        let r = get(&s, path);
        let took = t.elapsed();
        assert_eq!(r.status, 504, "{path}");
        assert!(took >= Duration::from_millis(1400) && took < Duration::from_secs(4), "{path}: {took:?}");
    }
    // The script and the `sleep` it started (same process group) are gone; nothing is
    // left a zombie.
    let (pid, child) = (read_pid(&d.path().join("cgi/stall.pid")), read_pid(&d.path().join("cgi/stall-child.pid")));
    eventually(5, "the stalled script's group killed", || group_alive(pid).is_empty());
    assert!(stat(child).is_none_or(|st| st.0 == 'Z' && st.1 != s.pid()), "sleep child {:?}", stat(child));
    no_children_left(&s);
}

#[test]
fn slow_output_is_streamed_chunked() {
    let (_d, s) = start(CGI);
    let mut c = connect(s.addr);
    c.write_all(b"GET /cgi/slow.sh HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let mut first_tick = None;
    let mut buf = [0u8; 4096];
    loop {
        let n = c.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if first_tick.is_none() && got.windows(6).any(|w| w == b"tick 0") {
            first_tick = Some(t.elapsed());
        }
    }
    let total = t.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\ntransfer-encoding: chunked\r\n"), "{text}");
    assert!(text.contains("\r\n7\r\ntick 0\n\r\n") && text.ends_with("7\r\ntick 4\n\r\n0\r\n\r\n"), "{text}");
    // The first line arrived long before the script ended (5 lines, 0.3 s apart).
    let first = first_tick.expect("tick 0");
    assert!(total >= Duration::from_millis(1200), "{first:?} {total:?}");
    assert!(total - first >= Duration::from_millis(900), "{first:?} {total:?}");
    no_children_left(&s);
}

#[test]
fn client_leaving_mid_stream_kills_the_script() {
    let (d, s) = start(CGI);
    for h2 in [false, true] {
        let pidfile = d.path().join("cgi/forever.pid");
        let _ = std::fs::remove_file(&pidfile);
        let pid = if h2 {
            // curl gives up after a second of an endless HTTP/2 response.
            let mut curl = Command::new("curl")
                .args([
                    "-sS",
                    "--http2-prior-knowledge",
                    "--max-time",
                    "1",
                    "-o",
                    "/dev/null",
                    &url(&s, "/cgi/forever.sh"),
                ])
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let pid = read_pid(&pidfile);
            assert!(stat(pid).is_some_and(|st| st.1 == s.pid()), "the script is the server's child");
            assert_eq!(curl.wait().unwrap().code(), Some(28));
            pid
        } else {
            let mut c = connect(s.addr);
            c.write_all(b"GET /cgi/forever.sh HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.windows(4).any(|w| w == b"tick") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            assert!(String::from_utf8_lossy(&got).contains("transfer-encoding: chunked"));
            let pid = read_pid(&pidfile);
            assert!(stat(pid).is_some_and(|st| st.1 == s.pid()), "the script is the server's child");
            pid
        };
        // Killed at its next write, well within the time limit; reaped; its `sleep` too.
        eventually(3, "the script's process group gone", || group_alive(pid).is_empty());
        no_children_left(&s);
        if !h2 {
            eventually(5, "the client's leaving logged", || log_has(&s, "cgi /cgi/forever.sh: client gone"));
        }
    }
    // The server is fine afterwards.
    assert_eq!(get(&s, "/cgi/answers.sh").text(), "default\n");
}

#[test]
fn http2_request_to_a_cgi_route() {
    let (d, s) = start(CGI);
    let out = d.path().join("out");
    let (st, h) = curl(&["--http2-prior-knowledge", &url(&s, "/cgi/env.py/p?q=2")], &out);
    assert_eq!(st, 200);
    assert_eq!(hval(&h, "content-type"), Some("text/plain"));
    let v = vars(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(v["SERVER_PROTOCOL"], "HTTP/2.0");
    assert_eq!((v["PATH_INFO"].as_str(), v["QUERY_STRING"].as_str()), ("/p", "q=2"));
    assert_eq!(v["HTTP_HOST"], s.addr.to_string());
    assert_eq!(v["SERVER_PORT"], s.addr.port().to_string());
    let (st, h) = curl(&["--http2-prior-knowledge", &url(&s, "/cgi/answers.sh?404")], &out);
    assert_eq!((st, hval(&h, "content-type")), (404, Some("text/plain")));
    let (st, _) = curl(&["--http2-prior-knowledge", &url(&s, "/cgi/answers.sh?local")], &out);
    assert_eq!(
        (st, std::fs::read_to_string(&out).unwrap().as_str()),
        (200, "GET /cgi/target.sh /from x=1 127.0.0.1 none\n")
    );
    no_children_left(&s);
}

#[test]
fn https_is_on_over_tls() {
    let d = TempDir::new("cgi-tls");
    script(&d, "cgi/env.py", ENV_PY);
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (c, k) = (d.write("a.crt", ck.cert.pem()), d.write("a.key", ck.signing_key.serialize_pem()));
    let port = free_port();
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[listen]]\nport = {port}\n\
             tls = {{ cert = \"{}\", key = \"{}\" }}\n[[vhost]]\n[[vhost.route]]\npath = \"/cgi\"\ncgi = {{ {CGI} }}\n",
            c.display(),
            k.display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let out = d.path().join("out");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let (st, _) = curl(
        &["--cacert", c.to_str().unwrap(), "--resolve", &resolve, &format!("https://localhost:{port}/cgi/env.py")],
        &out,
    );
    let v = vars(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(st, 200);
    assert_eq!((v["HTTPS"].as_str(), v["REQUEST_SCHEME"].as_str()), ("on", "https"));
    assert_eq!((v["SERVER_PROTOCOL"].as_str(), v["SERVER_PORT"].as_str()), ("HTTP/2.0", port.to_string().as_str()));
    no_children_left(&s);
}

#[test]
fn head_requests_and_the_process_limit() {
    let (d, s) = start(&format!("{CGI}, max_processes = 1"));
    // HEAD: no body sent, but the script is left to finish (not killed).
    let r = request(s.addr, "HEAD /cgi/marker.sh HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.body.len()), (200, 0));
    eventually(5, "the script ran to its end", || d.path().join("cgi/marker.txt").exists());
    no_children_left(&s);

    // One script at a time: while one streams, another waits for the time limit, then 503.
    let mut c = connect(s.addr);
    c.write_all(b"GET /cgi/forever.sh HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut buf = [0u8; 1024];
    assert!(c.read(&mut buf).unwrap() > 0);
    let t = Instant::now();
    assert_eq!(get(&s, "/cgi/answers.sh").status, 503);
    assert!(t.elapsed() >= Duration::from_millis(1400), "{:?}", t.elapsed());
    assert_eq!(get(&s, "/hello.txt").status, 200);
    drop(c);
    eventually(5, "a slot again", || get(&s, "/cgi/answers.sh").status == 200);
    no_children_left(&s);
}

#[test]
fn bad_cgi_settings_are_refused_with_their_line() {
    let d = TempDir::new("cgi-badcfg");
    std::fs::create_dir_all(d.path().join("cgi")).unwrap();
    for (i, table) in [
        "dir = \"nope\"",
        "dir = \"cgi\", timeout = 0",
        "dir = \"cgi\", max_output_head = 0",
        "dir = \"cgi\", typo = 1",
    ]
    .iter()
    .enumerate()
    {
        let f = d.write(
            &format!("bad{i}.toml"),
            format!("[[vhost]]\n[[vhost.route]]\npath = \"/cgi\"\ncgi = {{ {table} }}\n"),
        );
        let out = Command::new(common::BIN).args(["--config", f.to_str().unwrap(), "--check"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{table}: {err}");
        assert!(err.contains(&format!("{}:4:", f.display())), "{table}: {err}");
    }
}
