//! Where features meet: each protection holds for every spelling of the same request
//! (repeated slashes, encoded bytes, dot-segments, absolute-form targets, a `Host` that
//! disagrees), through symlinks, and for every way the server answers (static files,
//! listings, redirects, CGI, the proxy). Each test was written against an attack that
//! walked past a protection in an earlier release; `SELVEDGE_TEST_BIN` runs them against
//! another build.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use common::{request, Resp, Srv, TempDir};

/// `{SHA}` htpasswd line for user `u` with password `pw`.
const USER: &str = "u:{SHA}GpHWL3ymc5liWkNopqtdSjuqYHM=";
/// `Authorization` for it.
const CREDENTIALS: &str = "Basic dTpwdw==";

fn get(s: &Srv, target: &str) -> Resp {
    request(s.addr, &format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
}

fn start(d: &TempDir, routes: &str) -> Srv {
    let cfg = d.write("selvedge.toml", format!("[server]\nworkers = 1\n[[listen]]\nport = 0\n{routes}"));
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

/// The spellings of `path` an attacker tries: repeated slashes, an encoded first letter
/// (either hex case), a double encoding, dot-segments (plain and encoded), absolute form.
fn spellings(path: &str) -> Vec<String> {
    let rest = path.trim_start_matches('/');
    let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (c, more) = first.split_at(1);
    let hex = c.as_bytes()[0];
    vec![
        format!("/{rest}"),
        format!("//{rest}"),
        format!("///{first}//{tail}"),
        format!("/%{hex:02x}{more}/{tail}"),
        format!("/%{hex:02X}{more}/{tail}"),
        format!("/%25{hex:02x}{more}/{tail}"),
        format!("/./{rest}"),
        format!("/x/../{rest}"),
        format!("/x/%2e%2e/{rest}"),
        format!("/x/%2E./{rest}"),
        format!("/{first}/./{tail}"),
        format!("/{first}/x/../{tail}"),
        format!("http://t/{rest}"),
        format!("http://t//{rest}"),
    ]
}

/// `/admin` under `/` with `auth`, `/sub` with `allow` only for an address no one has:
/// every spelling of their files meets their checks (it was served by `/` before).
#[test]
fn route_checks_hold_for_every_spelling() {
    let d = TempDir::new("seam-routes");
    d.write("www/index.html", "home");
    d.write("www/admin/secret.txt", "the secret");
    d.write("www/sub/a.txt", "subscribers only");
    d.write("users", format!("{USER}\n"));
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n\
         [[vhost.route]]\npath = \"/admin\"\nroot = \"www/admin\"\nauth = { htpasswd = \"users\" }\n\
         [[vhost.route]]\npath = \"/sub\"\nroot = \"www/sub\"\nallow = [\"192.0.2.1\"]\n",
    );
    // Refused by the route's check, or naming another resource that is not there (a double
    // encoding): never served.
    for t in spellings("/admin/secret.txt") {
        let r = get(&srv, &t);
        assert!(matches!(r.status, 401 | 404), "{t}: {} {:?}", r.status, r.text());
        assert!(!r.text().contains("the secret"), "{t}");
    }
    for t in spellings("/sub/a.txt") {
        let r = get(&srv, &t);
        assert!(matches!(r.status, 403 | 404), "{t}: {} {:?}", r.status, r.text());
    }
    // With the password, the admin's file (and only through its route).
    let ok = request(
        srv.addr,
        &format!(
            "GET //%61dmin/secret.txt HTTP/1.1\r\nHost: t\r\nAuthorization: {CREDENTIALS}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!((ok.status, ok.text().as_str()), (200, "the secret"));
    // A prefix matches whole segments.
    assert_eq!(get(&srv, "/administrator").status, 404);
}

/// A symlink inside the root, to another route's directory, does not lead past that
/// route's checks; one to `/` lists nothing (the listing, its slash redirect, its index).
#[test]
fn symlinks_do_not_walk_around_routes_or_out_of_the_root() {
    let d = TempDir::new("seam-links");
    d.write("www/admin/secret.txt", "the secret");
    d.write("www/pub/a.txt", "public");
    d.write("users", format!("{USER}\n"));
    std::os::unix::fs::symlink(d.path().join("www/admin"), d.path().join("www/old-admin")).unwrap();
    std::os::unix::fs::symlink("/", d.path().join("www/rootlink")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", d.path().join("www/host.txt")).unwrap();
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\nlisting = true\n\
         [[vhost.route]]\npath = \"/admin\"\nroot = \"www/admin\"\nauth = { htpasswd = \"users\" }\n",
    );
    assert_eq!(get(&srv, "/old-admin/secret.txt").status, 404);
    assert_eq!(get(&srv, "/old-admin/").status, 404);
    for t in ["/rootlink/", "/rootlink/etc/", "/rootlink/etc", "/rootlink", "/rootlink/etc/hostname", "/host.txt"] {
        let r = get(&srv, t);
        assert_eq!(r.status, 404, "{t}: {:?}", r.text());
        assert!(r.header("location").is_none(), "{t}: a redirect confirms the path");
    }
    let listing = get(&srv, "/").text();
    assert!(listing.contains("pub/") && !listing.contains("rootlink") && !listing.contains("host.txt"), "{listing}");
    assert_eq!(get(&srv, "/pub/a.txt").text(), "public");
}

/// A raw upstream that records every request head it gets and answers 200 "ok".
fn recorder() -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { return };
            let record = record.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = conn.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        record.lock().unwrap().extend(buf.drain(..end + 4));
                        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// A protected proxied admin page is protected for every spelling; the upstream gets the
/// normalized path (never a dot-segment), no client `X-Real-IP` and no underscore names.
#[test]
fn proxied_routes_see_one_path_and_clean_fields() {
    let d = TempDir::new("seam-proxy");
    d.write("users", format!("{USER}\n"));
    let (up, seen) = recorder();
    let srv = start(
        &d,
        &format!(
            "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ upstream = \"http://{up}\" }}\n\
             [[vhost.route]]\npath = \"/admin\"\nproxy = {{ upstream = \"http://{up}\" }}\nauth = {{ htpasswd = \"users\" }}\n"
        ),
    );
    let heads = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    for t in spellings("/admin/users") {
        let r = get(&srv, &t);
        // The double encoding is another path (`/%61dmin/users`), proxied as such.
        if t.contains("%25") {
            assert!(heads().contains("GET /%2561dmin/users HTTP/1.1"), "{t}: {}", heads());
            continue;
        }
        assert_eq!(r.status, 401, "{t}");
    }
    assert!(!heads().contains("/admin"), "the upstream saw: {}", heads());
    for (asked, sent) in [
        ("/api/../secret", "GET /secret HTTP/1.1"),
        ("/api/%2e%2e/secret", "GET /secret HTTP/1.1"),
        ("/api/x/./y//z", "GET /api/x/y/z HTTP/1.1"),
        ("/%7euser/%41", "GET /~user/A HTTP/1.1"),
    ] {
        assert_eq!(get(&srv, asked).status, 200, "{asked}");
        assert!(heads().contains(sent), "{asked}: the upstream saw {}", heads());
    }
    assert!(!heads().contains(".."), "{}", heads());
    // An encoded slash is refused unless the route keeps it.
    assert_eq!(get(&srv, "/a%2Fb").status, 400);
    // Fields: X-Real-IP is the client as the server saw it; underscore names are dropped.
    seen.lock().unwrap().clear();
    let r = request(
        srv.addr,
        "GET /fields HTTP/1.1\r\nHost: t\r\nX-Real-IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\nX-Ok: 1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let h = heads().to_ascii_lowercase();
    assert!(h.contains("x-real-ip: 127.0.0.1\r\n") && h.contains("x-ok: 1\r\n"), "{h}");
    assert!(!h.contains("6.6.6.6") && !h.contains("x_forwarded_for"), "{h}");
}

/// `encoded_slashes = "keep"` forwards `%2F` as it is, to that route only.
#[test]
fn encoded_slashes_are_kept_only_where_asked() {
    let d = TempDir::new("seam-slash");
    let (up, seen) = recorder();
    let srv = start(
        &d,
        &format!(
            "[[vhost]]\n[[vhost.route]]\npath = \"/api\"\nproxy = {{ upstream = \"http://{up}\", encoded_slashes = \"keep\" }}\n\
             [[vhost.route]]\npath = \"/\"\nproxy = {{ upstream = \"http://{up}\" }}\n"
        ),
    );
    assert_eq!(get(&srv, "/api/projects/group%2fname/x").status, 200);
    assert!(String::from_utf8_lossy(&seen.lock().unwrap()).contains("GET /api/projects/group%2Fname/x HTTP/1.1"));
    assert_eq!(get(&srv, "/other/group%2Fname").status, 400);
}

/// The virtual host chosen by an absolute-form target is the one a script sees: a `Host`
/// field cannot contradict it (it reached a host that only accepts `public.test` and
/// handed the script `HTTP_HOST=evil.test`).
#[test]
fn scripts_see_the_authority_that_chose_the_host() {
    let d = TempDir::new("seam-host");
    let p = d.write(
        "cgi/host.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n%s %s' \"$HTTP_HOST\" \"$SERVER_NAME\"\n",
    );
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let srv =
        start(&d, "[[vhost]]\nhosts = [\"public.test\"]\n[[vhost.route]]\npath = \"/cgi\"\ncgi = { dir = \"cgi\" }\n");
    let r = request(
        srv.addr,
        "GET http://public.test/cgi/host.sh HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(r.text().contains("public.test public.test") && !r.text().contains("evil"), "{:?}", r.text());
    let r = request(srv.addr, "GET /cgi/host.sh HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 404, "no such host");
}

/// No `Location` a browser reads as another host: from a rule whose capture starts with a
/// slash, and from the directory redirect.
#[test]
fn relative_redirects_stay_on_this_host() {
    let d = TempDir::new("seam-redirect");
    d.write("www/sub/index.html", "sub");
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.redirect]]\nfrom = \"^/blog/(.*)$\"\nto = \"/$1\"\n\
         [[vhost.redirect]]\nfrom = \"^/go/(.*)$\"\nto = \"$1\"\n\
         [[vhost.route]]\npath = \"/\"\nroot = \"www\"\n",
    );
    for t in ["/blog//evil.example/x", "/blog/%2F%2Fevil.example", "/blog/\\evil.example", "/go//evil.example", "//sub"]
    {
        let r = get(&srv, t);
        let loc = r.header("location").unwrap_or("");
        let other_host = loc.starts_with("//") || loc.starts_with("/\\") || loc.starts_with('\\');
        assert!(!other_host, "{t}: {} Location: {loc:?}", r.status);
    }
    assert_eq!(get(&srv, "//sub").header("location"), Some("/sub/"));
    assert_eq!(get(&srv, "/blog//evil.example/x").header("location"), Some("/evil.example/x"));
}

/// Networks are compared as client addresses are: an IPv4-mapped network is its IPv4
/// network (it never matched before), and one with host bits set is refused at load.
#[test]
fn mapped_networks_match_and_host_bits_are_refused() {
    let d = TempDir::new("seam-nets");
    d.write("www/a.txt", "a");
    let srv =
        start(&d, "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\ndeny = [\"::ffff:127.0.0.0/104\"]\n");
    assert_eq!(get(&srv, "/a.txt").status, 403);
    drop(srv);
    for (nets, why) in
        [("deny = [\"10.1.2.3/8\"]", "10.0.0.0/8"), ("allow = [\"::ffff:10.0.0.1/104\"]", "::ffff:10.0.0.0/104")]
    {
        let cfg = d.write(
            "bad.toml",
            format!("[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n{nets}\n"),
        );
        let out =
            std::process::Command::new(common::bin()).args(["check", "-c", cfg.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{nets}: {err}");
        assert!(err.contains(why), "{nets}: {err}");
    }
}

/// Parameters on an earlier segment of a longer route's prefix (`/api;x/internal`) do not
/// walk around that route: a Java application behind reads `/api/internal`.
#[test]
fn path_parameters_do_not_walk_around_a_nested_route() {
    let d = TempDir::new("seam-params");
    let (up, seen) = recorder();
    let srv = start(
        &d,
        &format!(
            "[[vhost]]\n[[vhost.route]]\npath = \"/api\"\nproxy = {{ upstream = \"http://{up}\" }}\n\
             [[vhost.route]]\npath = \"/api/internal\"\nproxy = {{ upstream = \"http://{up}\" }}\n\
             deny = [\"0.0.0.0/0\", \"::/0\"]\n"
        ),
    );
    // A segment of parameters alone is no segment at all to a servlet container, which drops
    // the parameters and merges the slashes: `/api/;x/internal` is `/api/internal` there.
    for t in [
        "/api;x/internal/secret",
        "/api;/internal/secret",
        "/api/internal;x/secret",
        "/api;a;b/internal;c",
        "/api/;x/internal/secret",
        "/api/;/internal/secret",
        "/api/%3b/internal/secret",
        "/api/;jsessionid=1/;/internal",
    ] {
        assert_eq!(get(&srv, t).status, 403, "{t}");
    }
    assert_eq!(get(&srv, "/api;x/public").status, 200);
    assert!(!String::from_utf8_lossy(&seen.lock().unwrap()).contains("internal"));
}

/// An authority is `host[:port]`: one that smuggles another host past the virtual host's
/// choice (`good.test:1,evil.example`, userinfo) is a 400; a trailing dot names the same
/// host; a second `Authorization` is refused; a symlink to a dotfile is not served; a rule
/// that makes an empty `Location` is a 500, not an empty header.
#[test]
fn authorities_credentials_dotfiles_and_empty_locations() {
    let d = TempDir::new("seam-misc");
    d.write("www/a.txt", "a");
    d.write("www/.secret", "hidden");
    std::os::unix::fs::symlink(d.path().join("www/.secret"), d.path().join("www/notdot")).unwrap();
    d.write("users", format!("{USER}\n"));
    let srv = start(
        &d,
        "[[vhost]]\nhosts = [\"good.test\"]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\nauth = { htpasswd = \"users\" }\n\
         [[vhost]]\n[[vhost.redirect]]\nfrom = \"^(.*)/$\"\nto = \"$1\"\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n",
    );
    let with_host = |host: &str, extra: &str| {
        request(srv.addr, &format!("GET /a.txt HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"))
    };
    for host in ["good.test:1,evil.example", "good.test:@evil.example", "good.test;x", "g%6fod.test"] {
        assert_eq!(with_host(host, "").status, 400, "{host}");
    }
    assert_eq!(with_host("good.test.", "").status, 401, "the same host, its checks");
    assert_eq!(with_host("good.test", &format!("Authorization: {CREDENTIALS}\r\n")).status, 200);
    let two = format!("Authorization: {CREDENTIALS}\r\nAuthorization: Bearer other\r\n");
    assert_eq!(with_host("good.test", &two).status, 401);
    assert_eq!(get(&srv, "/notdot").status, 404);
    let r = get(&srv, "/");
    assert_eq!(r.status, 500, "{:?}", r.headers);
}
