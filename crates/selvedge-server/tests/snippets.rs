//! The ten translated nginx and Caddy snippets of `docs/config.md` ("From nginx and
//! Caddy"), read from the document, loaded by the real binary with the test's addresses and
//! directories, and exercised as their comments say: php-fpm for WordPress, selvedge
//! backends that echo what they receive, the WebSocket echo server (`ws_echo.py`) and the
//! authentication service (`auth_service.py`).

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use common::fpm::Fpm;
use common::{request, Resp, Srv, TempDir};

/// The selvedge snippet named `name` in docs/config.md.
fn snippet(name: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md")).unwrap();
    let mark = format!("```toml\n# snippet: {name}\n");
    let start = doc.find(&mark).unwrap_or_else(|| panic!("no snippet {name}")) + "```toml\n".len();
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

/// A process that prints its port on its first line, killed when dropped.
struct Proc {
    child: Child,
    port: u16,
}

impl Proc {
    fn start(cmd: &mut Command) -> Proc {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("no port: {line:?}"));
        Proc { child, port }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Everything the snippets talk to.
struct World {
    d: TempDir,
    a: Srv,
    b: Srv,
    _fpm: Fpm,
    ws: Proc,
    auth: Proc,
}

impl World {
    fn new() -> World {
        let d = TempDir::new("snippets");
        d.write("site/index.html", "home page");
        d.write("site/app.js", "app code");
        d.write("site/blog/index.html", "blog index");
        d.write("site/index.php", "<?php echo 'php uri=', $_SERVER['REQUEST_URI'], ' q=', $_SERVER['QUERY_STRING'];");
        d.write("site/admin/secret.txt", "a file");
        let backend = |name: &str| {
            let cfg = d.write(
                &format!("{name}.toml"),
                format!(
                    "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\n\
                     respond = {{ body = \"{name} {{method}} {{uri}} id={{header.x-request-id}} user={{header.remote-user}}\" }}\n"
                ),
            );
            Srv::start(&["--config", cfg.to_str().unwrap()])
        };
        let (a, b) = (backend("A"), backend("B"));
        let fpm = Fpm::start(&d, 2);
        let dir = env!("CARGO_MANIFEST_DIR");
        let ws = Proc::start(Command::new("python3").arg(format!("{dir}/tests/ws_echo.py")).arg("serve"));
        let auth = Proc::start(Command::new("python3").arg(format!("{dir}/tests/auth_service.py")));
        World { d, a, b, _fpm: fpm, ws, auth }
    }

    /// Snippet `name` with this world's addresses and directories, running.
    fn serve(&self, name: &str) -> Srv {
        let site = self.d.path().join("site");
        let text = snippet(name)
            .replace("/srv/site", site.to_str().unwrap())
            .replace("unix:/run/php/php-fpm.sock", &format!("unix:{}", self.d.path().join("fpm.sock").display()))
            .replace("127.0.0.1:9000", &self.a.addr.to_string())
            .replace("127.0.0.1:9001", &self.b.addr.to_string())
            .replace("127.0.0.1:9002", &format!("127.0.0.1:{}", self.ws.port))
            .replace("127.0.0.1:9091", &format!("127.0.0.1:{}", self.auth.port));
        let cfg = self.d.write(&format!("{name}.toml"), format!("[server]\nworkers = 1\n[[listen]]\nport = 0\n{text}"));
        Srv::start(&["--config", cfg.to_str().unwrap()])
    }
}

fn send(addr: SocketAddr, method: &str, target: &str, fields: &[(&str, &str)]) -> Resp {
    let mut raw = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    if !fields.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        raw.push_str("Host: site.test\r\n");
    }
    for (n, v) in fields {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    request(addr, &raw)
}

fn get(s: &Srv, target: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let r = send(s.addr, "GET", target, fields);
    (r.status, r.text())
}

#[test]
fn the_ten_snippets_do_what_they_say() {
    let w = World::new();

    // 1. WordPress: scripts to php-fpm, files as they are, permalinks to index.php.
    let s = w.serve("wordpress");
    assert_eq!(get(&s, "/app.js", &[]), (200, "app code".into()));
    assert_eq!(get(&s, "/blog", &[]), (200, "blog index".into()), "a directory: `{{path}}/`");
    assert_eq!(get(&s, "/blog/", &[]), (200, "blog index".into()));
    assert_eq!(get(&s, "/index.php?p=1", &[]), (200, "php uri=/index.php?p=1 q=p=1".into()));
    assert_eq!(get(&s, "/2026/11/hello-world/?utm=x", &[]), (200, "php uri=/index.php?utm=x q=utm=x".into()));
    drop(s);

    // 2. A single-page app and its API.
    let s = w.serve("spa");
    assert!(get(&s, "/api/items?x=1", &[]).1.starts_with("A GET /api/items?x=1 id="));
    assert_eq!(get(&s, "/app.js", &[]), (200, "app code".into()));
    assert_eq!(get(&s, "/settings/profile", &[]), (200, "home page".into()));
    drop(s);

    // 3. Canonical host.
    let s = w.serve("canonical");
    let r = send(s.addr, "GET", "/a/b?c=1", &[("Host", "example.com")]);
    assert_eq!((r.status, r.header("location")), (301, Some("https://www.example.com/a/b?c=1")));
    assert_eq!(get(&s, "/", &[("Host", "www.example.com")]), (200, "home page".into()));
    drop(s);

    // 4. Maintenance: this test's address is not the office's.
    let s = w.serve("maintenance");
    let r = send(s.addr, "GET", "/", &[]);
    assert_eq!((r.status, r.header("retry-after"), r.text()), (503, Some("600"), "Down for maintenance\n".into()));
    let r = send(s.addr, "GET", "/", &[("X-Forwarded-For", "203.0.113.9")]);
    assert_eq!(r.status, 503, "no trusted proxy: a client's field does not make it the office");
    drop(s);

    // 5. A/B by cookie.
    let s = w.serve("ab");
    assert!(get(&s, "/p", &[("Cookie", "x=1; ab=b")]).1.starts_with("B GET /p "));
    assert!(get(&s, "/p", &[("Cookie", "ab=a")]).1.starts_with("A GET /p "));
    assert!(get(&s, "/p", &[]).1.starts_with("A GET /p "));
    drop(s);

    // 6. CORS preflight answered here, the rest to the API.
    let s = w.serve("cors");
    let r = send(
        s.addr,
        "OPTIONS",
        "/api/items",
        &[("Origin", "https://app.example"), ("Access-Control-Request-Method", "POST")],
    );
    assert_eq!((r.status, r.header("access-control-allow-origin")), (204, Some("https://app.example")));
    assert_eq!(r.header("access-control-allow-methods"), Some("GET, POST"));
    let r = send(
        s.addr,
        "OPTIONS",
        "/api/items",
        &[("Origin", "https://evil.example"), ("Access-Control-Request-Method", "POST")],
    );
    assert!(r.text().starts_with("A OPTIONS /api/items"), "another origin is not answered here: {}", r.text());
    assert!(get(&s, "/api/items", &[]).1.starts_with("A GET /api/items"));
    drop(s);

    // 7. Internal-only admin, whatever the spelling.
    let s = w.serve("admin");
    for p in ["/admin", "/admin/x", "//admin/x", "/%61dmin/x", "/x/../admin", "/admin;a=b/x", "/./admin/"] {
        assert_eq!(get(&s, p, &[]).0, 403, "{p}");
    }
    assert_eq!(get(&s, "/administrator", &[]).0, 404, "not under /admin");
    assert_eq!(get(&s, "/app.js", &[]), (200, "app code".into()));
    drop(s);

    // 8. WebSocket handshakes to the socket server (a full echo through the tunnel).
    let s = w.serve("websocket");
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{dir}/tests/ws_echo.py"))
        .arg("client")
        .arg(format!("ws://{}/chat", s.addr))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "{}", String::from_utf8_lossy(&out.stderr));
    assert!(get(&s, "/chat", &[]).1.starts_with("A GET /chat"), "not a handshake: the app");
    drop(s);

    // 9. The request id: upstream, back to the client, in the log.
    let s = w.serve("request_id");
    let r = send(s.addr, "GET", "/r", &[("X-Request-Id", "forged")]);
    let id = r.header("x-request-id").unwrap().to_string();
    assert_eq!(id.len(), 32, "a new id, not the client's: {id}");
    assert_eq!(r.text(), format!("A GET /r id={id} user="));
    let log = w.d.path().join("site/access.log");
    common::eventually(5, "the log line", || std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&id)));
    drop(s);

    // 10. Forward authentication.
    let s = w.serve("forward_auth");
    assert_eq!(
        get(&s, "/x", &[("Cookie", "session=good"), ("Remote-User", "eve")]).1.split(" id=").next(),
        Some("A GET /x")
    );
    assert!(get(&s, "/x", &[("Cookie", "session=good")]).1.ends_with("user=alice"));
    assert_eq!(get(&s, "/x", &[("Remote-User", "eve")]).0, 401);
    assert_eq!(get(&s, "/x", &[("Cookie", "session=forbidden")]).0, 403);
}
