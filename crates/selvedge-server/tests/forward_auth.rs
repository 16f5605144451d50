//! `forward_auth` against a real authentication service (`auth_service.py`, Python's
//! `http.server`) and the real binary: what passes carries the service's fields to the app,
//! what the service refuses goes back to the client, a failing or slow service is 502, and
//! cached answers spare the service.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{Srv, TempDir};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/auth_service.py");

struct Service {
    child: Child,
    port: u16,
}

impl Service {
    fn start() -> Service {
        let mut child =
            Command::new("python3").arg(SCRIPT).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the service did not start: {line:?}"));
        Service { child, port }
    }

    fn count(&self) -> u64 {
        let r = common::request(
            format!("127.0.0.1:{}", self.port).parse().unwrap(),
            "GET /count HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        r.text().parse().unwrap()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_service_decides() {
    let d = TempDir::new("fwd-auth");
    let svc = Service::start();
    let backend_cfg = d.write(
        "backend.toml",
        "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\n\
         respond = { body = \"user={header.remote-user} groups={header.remote-groups} uri={uri}\" }\n",
    );
    let backend = Srv::start(&["--config", backend_cfg.to_str().unwrap()]);
    let fa = |extra: &str| {
        format!(
            "forward_auth = {{ url = \"http://127.0.0.1:{}/verify?app=1\", copy_headers = [\"Remote-User\", \"Remote-Groups\"], timeout = \"1s\"{extra} }}",
            svc.port
        )
    };
    let cfg = d.write(
        "front.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/app\"\nproxy = {{ upstream = \"http://{b}\" }}\n{f}\n\
             [[vhost.route]]\npath = \"/cached\"\nrespond = {{ body = \"user={{header.remote-user}}\" }}\n{c}\n\
             [[vhost.route]]\npath = \"/open\"\nrespond = {{ body = \"open\" }}\n",
            b = backend.addr,
            f = fa(""),
            c = fa(", cache = \"30s\"")
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let get = |path: &str, fields: &[(&str, &str)]| s.get_h(path, fields);

    // Through, with the service's fields (and never the client's own of those names).
    let r = get("/app/x?y=1", &[("Cookie", "session=good"), ("Remote-User", "mallory"), ("remote-user", "eve")]);
    assert_eq!((r.status, r.text()), (200, "user=alice groups=admins uri=/app/x?y=1".into()));
    let r = get("/app/x", &[("Authorization", "Bearer good")]);
    assert_eq!(r.text(), "user=alice groups=admins uri=/app/x");
    // Refused: 401 and 403 as the service sent them, a redirect to its login page.
    let r = get("/app/x", &[("Remote-User", "mallory")]);
    assert_eq!((r.status, r.header("www-authenticate"), r.text()), (401, Some("Bearer"), "who are you".into()));
    let r = get("/app/x", &[("Cookie", "session=forbidden")]);
    assert_eq!((r.status, r.text()), (403, "forbidden".into()));
    let r = get("/app/deep?q=1", &[("X-Want", "redirect")]);
    assert_eq!((r.status, r.header("location")), (302, Some("https://login.example/?rd=/app/deep?q=1")));
    // Anything else, or no answer in time: 502.
    assert_eq!(get("/app/x", &[("X-Want", "boom")]).status, 502);
    let t = std::time::Instant::now();
    assert_eq!(get("/app/x", &[("X-Want", "slow")]).status, 502);
    assert!(t.elapsed() < std::time::Duration::from_millis(2500), "{:?}", t.elapsed());
    // A route without forward_auth never asks.
    let before = svc.count();
    assert_eq!(get("/open", &[]).text(), "open");
    assert_eq!(svc.count(), before);
    let r = get("/cached/z", &[("Cookie", "session=good")]);
    assert_eq!(r.text(), "user=alice");
    // Cached: the same cookie does not ask again; another one does; a denial is not cached.
    let before = svc.count();
    for _ in 0..5 {
        assert_eq!(get("/cached/z", &[("Cookie", "session=good")]).text(), "user=alice");
    }
    assert_eq!(svc.count(), before, "answered from the cache");
    assert_eq!(get("/cached/z", &[("Cookie", "session=good; x=1")]).text(), "user=alice");
    assert_eq!(svc.count(), before + 1);
    for _ in 0..3 {
        assert_eq!(get("/cached/z", &[("Cookie", "session=bad")]).status, 401);
    }
    assert_eq!(svc.count(), before + 4, "denials are asked each time");
}

/// The service sees a `GET` to its URL with the client's method, target and host forwarded,
/// as this server reads the request (the normalized path, whatever the spelling or form),
/// and never a client's own claims about them.
#[test]
fn the_service_sees_the_request() {
    let d = TempDir::new("fwd-auth-seen");
    let svc = Service::start();
    let cfg = d.write(
        "front.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nrespond = {{ body = \"seen={{header.x-seen}}\" }}\n\
             forward_auth = {{ url = \"http://127.0.0.1:{}/verify?app=1\", copy_headers = [\"X-Seen\"] }}\n",
            svc.port
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let r = common::request(
        s.addr,
        "DELETE /a/b?c=d HTTP/1.1\r\nHost: shop.example\r\nCookie: session=good\r\nX-Forwarded-Method: GET\r\n\
         X-Original-URL: https://public.example/\r\nX-Forwarded-Uri: /public\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "seen=/verify?app=1 DELETE /a/b?c=d shop.example DELETE http://shop.example/a/b?c=d");
    // The host that chose the virtual host, not a `Host` an absolute-form target overrides;
    // no field a client's `Connection` names is taken off the server's own.
    let r = common::request(
        s.addr,
        "GET http://shop.example/a/b?c=d HTTP/1.1\r\nHost: public.example\r\nCookie: session=good\r\n\
         Connection: close, x-forwarded-uri, x-original-url, host\r\n\r\n",
    );
    assert_eq!(r.text(), "seen=/verify?app=1 GET /a/b?c=d shop.example GET http://shop.example/a/b?c=d");
    for target in ["http://shop.example/x/../a//b?c=d", "/a/%62?c=d", "//a/./b?c=d", "/a;x/b;y?c=d"] {
        let r = common::request(
            s.addr,
            &format!(
                "GET {target} HTTP/1.1\r\nHost: shop.example\r\nCookie: session=good\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(
            r.text(),
            "seen=/verify?app=1 GET /a/b?c=d shop.example GET http://shop.example/a/b?c=d",
            "{target}"
        );
    }
    // A field the service could not be sent as it is (a control byte, which HTTP/2 lets
    // through) is a 400, never a question about less than the request.
    let out = Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Cookie: session=good"])
        .args(["-H", "x-j: a\u{1}b", &format!("http://{}/a", s.addr)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "400");
}

/// A client's `Connection` cannot take the copied identity off the request on its way
/// upstream.
#[test]
fn copied_fields_survive_connection_tokens() {
    let d = TempDir::new("fwd-auth-conn");
    let svc = Service::start();
    let backend_cfg = d.write(
        "backend.toml",
        "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\n\
         respond = { body = \"user={header.remote-user}\" }\n",
    );
    let backend = Srv::start(&["--config", backend_cfg.to_str().unwrap()]);
    let cfg = d.write(
        "front.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nproxy = {{ upstream = \"http://{}\" }}\n\
             forward_auth = {{ url = \"http://127.0.0.1:{}/verify\", copy_headers = [\"Remote-User\"] }}\n",
            backend.addr, svc.port
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let r = s.get_h("/x", &[("Cookie", "session=good"), ("Connection", "remote-user")]);
    assert_eq!(r.text(), "user=alice");
}

/// A cached answer is reused only for what the service decided on: the same method, host,
/// target, client and credentials.
#[test]
fn cached_answers_are_keyed_on_the_request() {
    let d = TempDir::new("fwd-auth-key");
    let svc = Service::start();
    let cfg = d.write(
        "front.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nrespond = {{ body = \"user={{header.remote-user}}{{header.remote_user}}\" }}\n\
             forward_auth = {{ url = \"http://127.0.0.1:{}/verify\", copy_headers = [\"Remote-User\"], cache = \"60s\" }}\n",
            svc.port
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let good = [("Cookie", "session=good")];
    assert_eq!(s.get_h("/public", &good).text(), "user=alice");
    let n = svc.count();
    assert_eq!(s.get_h("/public", &good).text(), "user=alice");
    assert_eq!(svc.count(), n, "the same request: from the cache");
    for (path, host) in [("/admin", "t"), ("/public?x", "t"), ("/public", "other.example")] {
        let before = svc.count();
        let r = common::request(
            s.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nCookie: session=good\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(r.text(), "user=alice");
        assert_eq!(svc.count(), before + 1, "{path} on {host} asks the service");
    }
    // A client's `Remote_User` is no more the copied field than `Remote-User` is.
    let r = s.get_h("/u", &[("Cookie", "session=good"), ("Remote_User", "mallory"), ("REMOTE-USER", "eve")]);
    assert_eq!(r.text(), "user=alice");
}

/// The method goes to the service in upper case (as applications read it); a path that
/// `try_files` makes on the same route is asked about too.
#[test]
fn method_case_and_try_files_paths() {
    let d = TempDir::new("fwd-auth-try");
    d.write("www/public/index.html", "public");
    d.write("www/private/data.html", "SECRET");
    let svc = Service::start();
    let cfg = d.write(
        "front.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n\
             try_files = [\"{{path}}\", \"{{path}}.html\", \"/private/{{query.page}}.html\"]\n\
             forward_auth = {{ url = \"http://127.0.0.1:{}/verify\", copy_headers = [\"X-Seen\"] }}\n\
             [[vhost.route]]\npath = \"/echo\"\nrespond = {{ body = \"{{header.x-seen}}\" }}\n\
             forward_auth = {{ url = \"http://127.0.0.1:{}/verify\", copy_headers = [\"X-Seen\"] }}\n",
            d.path().join("www").display(),
            svc.port,
            svc.port
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let good = [("Cookie", "session=good")];
    assert_eq!(s.get_h("/public/index.html", &good).text(), "public");
    assert_eq!(s.get_h("/private/data.html", &good).status, 403);
    assert_eq!(s.get_h("/private/data", &good).status, 403);
    let r = s.get_h("/public/nothing?page=data", &good);
    assert_eq!((r.status, r.text()), (403, "private".into()), "the fallback's path is asked about");
    let r = common::request(
        s.addr,
        "delete /echo HTTP/1.1\r\nHost: t\r\nCookie: session=good\r\nConnection: close\r\n\r\n",
    );
    assert!(r.text().contains(" DELETE /echo t DELETE "), "{}", r.text());
}
