//! Configuration conventions, with the binary run as a process: listeners named by
//! `address` (a Unix socket, `host:port`), `server_tokens = false`, wildcard virtual hosts,
//! durations and sizes in the file.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{parse, request, Srv, TempDir};

fn start(d: &TempDir, text: &str) -> Srv {
    let cfg = d.write("selvedge.toml", text);
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

#[test]
fn unix_socket_listener_from_the_config() {
    let d = TempDir::new("unix");
    d.write("site/a.txt", "over a unix socket");
    let sock = d.path().join("run/selvedge.sock");
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    let s = start(
        &d,
        &format!(
            "[server]\nworkers = 2\n[[listen]]\naddress = \"127.0.0.1:0\"\n[[listen]]\naddress = \"unix:run/selvedge.sock\"\n\
             [timeouts]\nidle = \"30s\"\n[limits]\nmax_body = \"1MiB\"\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.path().join("site").display()
        ),
    );
    // The startup line names the socket.
    let line = s.stderr.lock().unwrap().iter().find(|l| l.contains("listening")).cloned().unwrap();
    assert!(line.contains(&format!("unix:{}", sock.display())), "{line}");
    for _ in 0..3 {
        let mut c = UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        let r = parse(&buf, true).unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "over a unix socket"));
    }
    // The 1 MiB body limit from the file: 413 over it.
    let r = request(s.addr, "POST /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 413);
    assert_eq!(s.get("/a.txt").status, 200);
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn server_tokens_off_sends_no_server_field() {
    let d = TempDir::new("tokens");
    d.write("site/a.txt", "x");
    let root = d.path().join("site");
    let on = start(
        &d,
        &format!("[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n", root.display()),
    );
    assert_eq!(on.get("/a.txt").header("server"), Some("selvedge"));
    assert_eq!(on.stop(), Some(0));
    let off = start(
        &d,
        &format!(
            "[server]\nserver_tokens = false\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            root.display()
        ),
    );
    for path in ["/a.txt", "/missing"] {
        let r = off.get(path);
        assert!(r.header("server").is_none(), "{path}: {r:?}");
        assert!(r.header("date").is_some());
    }
    // The engine's own answers too (a 400).
    let r = request(off.addr, "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n");
    assert_eq!(r.status, 400);
    assert!(r.header("server").is_none(), "{r:?}");
    assert_eq!(off.stop(), Some(0));
}

#[test]
fn wildcard_virtual_hosts_match_one_label() {
    let d = TempDir::new("wild");
    for (dir, body) in [("any", "default"), ("wild", "wildcard"), ("exact", "exact")] {
        d.write(&format!("{dir}/who.txt"), body);
    }
    let s = start(
        &d,
        &format!(
            "[[listen]]\nport = 0\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}/any\"\n\
             [[vhost]]\nhosts = [\"*.example.com\"]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}/wild\"\n\
             [[vhost]]\nhosts = [\"www.example.com\"]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}/exact\"\n",
            d.path().display()
        ),
    );
    for (host, want) in [
        ("a.example.com", "wildcard"),
        ("A.Example.COM:8080", "wildcard"),
        ("www.example.com", "exact"),
        ("example.com", "default"),
        ("a.b.example.com", "default"),
        ("other.org", "default"),
    ] {
        let r = request(s.addr, &format!("GET /who.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
        assert_eq!((r.status, r.text().as_str()), (200, want), "{host}");
    }
    assert_eq!(s.stop(), Some(0));
}
