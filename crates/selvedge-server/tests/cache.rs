//! The HTTP cache against the real binary and a real origin that counts its requests
//! (`cache_origin.py`, Python's `http.server`): fresh hits, revalidation with 304, Vary,
//! what is never stored, invalidation, collapsing, stale-if-error with the origin down,
//! stale-while-revalidate, purges, the disk tier across a restart, bounds under 10× the
//! limits, broken bodies, and route checks before hits.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{admin_addr, eventually, request, Resp, Srv, TempDir};

const ORIGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cache_origin.py");

struct Origin {
    child: Child,
    port: u16,
}

impl Origin {
    fn start() -> Origin {
        Origin::on(0)
    }

    fn on(port: u16) -> Origin {
        let mut child = Command::new("python3")
            .arg(ORIGIN)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the origin did not start: {line:?}"));
        Origin { child, port }
    }

    /// Requests the origin had for `path`.
    fn count(&self, path: &str) -> u64 {
        let r = request(
            format!("127.0.0.1:{}", self.port).parse().unwrap(),
            &format!("GET /__count?p={path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
        );
        r.text().parse().unwrap()
    }

    fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server proxying `/` to `origin` with `cache` on the route (and `extra` before the
/// vhost, `route_extra` on the route).
fn server(d: &TempDir, origin: &Origin, cache: &str, extra: &str, route_extra: &str) -> Srv {
    let cfg = d.write(
        "s.toml",
        format!(
            "[server]\nworkers = 2\n[[listen]]\nport = 0\n[admin]\nlisten = \"127.0.0.1:0\"\n{extra}\n\
             [[vhost]]\n[vhost.matchers.nocache]\nheader = {{ \"x-nocache\" = \"*\" }}\n\
             [[vhost.route]]\npath = \"/\"\n\
             proxy = {{ upstream = \"http://127.0.0.1:{}\" }}\ncache = {cache}\n{route_extra}\n",
            origin.port
        ),
    );
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

fn status(r: &Resp) -> &str {
    r.header("cache-status").unwrap_or("")
}

fn raw(srv: &Srv, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    if method == "POST" || method == "PUT" {
        r.push_str("Content-Length: 0\r\n");
    }
    r.push_str("\r\n");
    request(srv.addr, &r)
}

fn metric(admin: SocketAddr, name: &str) -> u64 {
    let r = request(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let text = r.text();
    let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn fresh_entries_answer_gets_heads_ranges_and_conditionals() {
    let d = TempDir::new("cache-fresh");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let p = "/a?cc=max-age=60&etag=%22v1%22";
    let first = srv.get(p);
    assert_eq!(first.status, 200);
    assert!(status(&first).contains("fwd=uri-miss"), "{first:?}");
    let hit = srv.get(p);
    assert_eq!(hit.body, first.body);
    assert_eq!(status(&hit), "selvedge; hit", "{hit:?}");
    assert!(hit.header("age").is_some());
    // HEAD from the stored GET, with its length.
    let head = raw(&srv, "HEAD", p, &[]);
    assert_eq!(head.header("content-length"), Some(first.body.len().to_string().as_str()));
    assert!(status(&head).contains("hit"));
    // A range from the stored 200.
    let part = srv.get_h(p, &[("Range", "bytes=0-2")]);
    assert_eq!(part.status, 206);
    assert_eq!(part.body, &first.body[..3]);
    assert_eq!(part.header("content-range"), Some(format!("bytes 0-2/{}", first.body.len()).as_str()));
    let bad = srv.get_h(p, &[("Range", "bytes=999-")]);
    assert_eq!(bad.status, 416);
    // A conditional client gets 304 from the entry.
    let nm = srv.get_h(p, &[("If-None-Match", "\"v1\"")]);
    assert_eq!(nm.status, 304);
    assert_eq!(nm.header("etag"), Some("\"v1\""));
    assert_eq!(o.count("/a"), 1, "one fetch for all of these");
    // A large body of the memory tier is sent from an unlinked file (sendfile), whole and
    // in part.
    let big = "/big?cc=max-age=60&size=100000";
    let first = srv.get(big);
    let hit = srv.get(big);
    assert!(status(&hit).contains("hit"));
    assert_eq!(hit.body, first.body);
    let tail = srv.get_h(big, &[("Range", "bytes=99990-")]);
    assert_eq!(tail.status, 206);
    assert_eq!(tail.body, &first.body[99_990..]);
    // A HEAD nothing stored answers goes upstream as a HEAD; a GET then fills the cache.
    let h = raw(&srv, "HEAD", "/h?cc=max-age=60", &[]);
    assert_eq!(h.status, 200);
    assert!(status(&h).contains("detail=head"), "{h:?}");
    assert_eq!(srv.get("/h?cc=max-age=60").text(), "GET /h #2");
    let h = raw(&srv, "HEAD", "/h?cc=max-age=60", &[]);
    assert_eq!(h.header("content-length"), Some("9"));
    assert!(status(&h).contains("hit"));
    assert_eq!(o.count("/h"), 2);
    // A client's no-cache or max-age=0 does not send the request upstream (by default).
    for cc in ["no-cache", "max-age=0"] {
        assert!(status(&srv.get_h(p, &[("Cache-Control", cc)])).contains("hit"));
    }
    assert_eq!(o.count("/a"), 1);
    // The port, case and trailing dot of the authority are the upstream's to see: each
    // spelling is a key of its own.
    let first = srv.get_h("/port?cc=max-age=60", &[]);
    assert!(status(&first).contains("fwd=uri-miss"));
    for host in ["t:6666", "T", "t."] {
        let r = request(
            srv.addr,
            &format!("GET /port?cc=max-age=60 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        assert!(status(&r).contains("fwd=uri-miss"), "{host}: {r:?}");
    }
    assert!(status(&srv.get("/port?cc=max-age=60")).contains("hit"));
}

#[test]
fn clients_directives_are_followed_when_the_zone_says() {
    let d = TempDir::new("cache-client-cc");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\", client_directives = true }", "", "");
    let p = "/a?cc=max-age=60";
    srv.get(p);
    let r = srv.get_h(p, &[("Cache-Control", "no-cache")]);
    assert!(status(&r).contains("fwd=stale"), "{r:?}");
    assert_eq!(o.count("/a"), 2);
    // The upstream's Age counts: 100 s old with max-age=60 is stale when it arrives.
    srv.get("/old?cc=max-age=60&age=100");
    let again = srv.get("/old?cc=max-age=60&age=100");
    assert!(!status(&again).contains("hit"), "{again:?}");
    assert_eq!(o.count("/old"), 2);
    // no-cache is never served stale, whatever the client allows.
    srv.get("/nc?cc=no-cache&etag=%22n%22");
    drop(o);
    let r = srv.get_h("/nc?cc=no-cache&etag=%22n%22", &[("Cache-Control", "stale-if-error=1000")]);
    assert_eq!(r.status, 502, "{r:?}");
}

#[test]
fn stale_entries_are_revalidated_with_validators() {
    let d = TempDir::new("cache-reval");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let p = "/r?cc=max-age=1&etag=%22e%22";
    let first = srv.get(p);
    assert_eq!(first.header("x-origin-count"), Some("1"));
    std::thread::sleep(Duration::from_millis(2100));
    let again = srv.get(p);
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body, "the stored body, confirmed");
    assert!(status(&again).contains("fwd=stale; fwd-status=304"), "{again:?}");
    // The 304's fields replace the stored ones.
    assert_eq!(again.header("x-origin-count"), Some("2"));
    assert!(status(&srv.get(p)).contains("hit"));
    assert_eq!(o.count("/r"), 2);
}

#[test]
fn variants_follow_vary_with_accept_encoding_normalized() {
    let d = TempDir::new("cache-vary");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let p = "/v?cc=max-age=60&vary=Accept-Encoding,X-Lang";
    let a = srv.get_h(p, &[("Accept-Encoding", "gzip, br"), ("X-Lang", "en")]);
    let b = srv.get_h(p, &[("Accept-Encoding", "br;q=1.0,gzip"), ("X-Lang", "en")]);
    assert_eq!(a.body, b.body, "the same codings, spelled differently: one variant");
    assert!(status(&b).contains("hit"));
    let c = srv.get_h(p, &[("Accept-Encoding", "gzip, br"), ("X-Lang", "fr")]);
    assert!(c.text().contains("X-Lang=fr"), "{c:?}");
    let e = srv.get_h(p, &[("Accept-Encoding", "identity"), ("X-Lang", "en")]);
    assert!(status(&e).contains("fwd=uri-miss"));
    let star = srv.get_h(p, &[("Accept-Encoding", "gzip;q=0, *"), ("X-Lang", "en")]);
    assert!(status(&star).contains("fwd=uri-miss"), "a client refusing gzip is not the gzip variant's");
    assert_eq!(o.count("/v"), 4);
    // `Vary: *` is never stored.
    srv.get("/star?cc=max-age=60&vary=*");
    let s = srv.get("/star?cc=max-age=60&vary=*");
    assert!(status(&s).contains("detail=vary-star"), "{s:?}");
}

#[test]
fn what_a_shared_cache_never_stores() {
    let d = TempDir::new("cache-never");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\", no_store = \"nocache\", bypass = \"nocache\" }", "", "");
    for (path, why) in [
        ("/ns?cc=no-store", "no-store"),
        ("/pv?cc=private,max-age=60", "private"),
        ("/ck?cc=max-age=60&cookie=1", "set-cookie"),
        ("/nf", "no-freshness"),
    ] {
        let first = srv.get(path);
        assert!(status(&first).contains(&format!("detail={why}")), "{path}: {first:?}");
        srv.get(path);
        let p = &path[..path.find('?').unwrap_or(path.len())];
        assert_eq!(o.count(p), 2, "{path} is fetched each time");
    }
    // A request with credentials is stored only when the response allows sharing it.
    let auth = [("Authorization", "Bearer x")];
    assert!(status(&srv.get_h("/au?cc=max-age=60", &auth)).contains("detail=authorization"));
    assert!(status(&srv.get("/au?cc=max-age=60")).contains("fwd=uri-miss"), "not stored for the next client");
    srv.get_h("/pub?cc=max-age=60,public", &auth);
    assert!(status(&srv.get("/pub?cc=max-age=60,public")).contains("hit"));
    // The request's no-store, and the route's bypass matcher.
    srv.get_h("/rq?cc=max-age=60", &[("Cache-Control", "no-store")]);
    assert!(status(&srv.get("/rq?cc=max-age=60")).contains("fwd=uri-miss"));
    srv.get("/bp?cc=max-age=60");
    let by = srv.get_h("/bp?cc=max-age=60", &[("X-Nocache", "1")]);
    assert!(status(&by).contains("fwd=bypass"), "{by:?}");
    assert_eq!(o.count("/bp"), 2);
}

#[test]
fn unsafe_methods_invalidate_the_target() {
    let d = TempDir::new("cache-unsafe");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let p = "/u?cc=max-age=60";
    srv.get(p);
    assert!(status(&srv.get(p)).contains("hit"));
    let post = raw(&srv, "POST", p, &[]);
    assert!(status(&post).contains("fwd=method"), "{post:?}");
    let after = srv.get(p);
    assert!(status(&after).contains("fwd=uri-miss"), "{after:?}");
    assert_eq!(o.count("/u"), 3);
    // The same URL spelled another way is the same key.
    srv.get("/w?cc=max-age=60");
    raw(&srv, "DELETE", "/x/../w?cc=max-age=60", &[]);
    assert!(status(&srv.get("/w?cc=max-age=60")).contains("fwd=uri-miss"));
}

#[test]
fn concurrent_misses_collapse_into_one_fetch() {
    let d = TempDir::new("cache-collapse");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let addr = srv.addr;
    let threads: Vec<_> = (0..20)
        .map(|_| {
            std::thread::spawn(move || {
                request(addr, "GET /c?cc=max-age=60&delay=1000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            })
        })
        .collect();
    let answers: Vec<Resp> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(answers.iter().all(|r| r.status == 200 && r.text() == "GET /c #1"), "{answers:?}");
    assert_eq!(o.count("/c"), 1, "one upstream request for twenty clients");
    let collapsed = answers.iter().filter(|r| status(r).contains("collapsed")).count();
    assert!(collapsed >= 10, "{collapsed} waited");
    assert!(metric(admin_addr(&srv), "selvedge_cache_collapsed_total") >= collapsed as u64);
}

#[test]
fn stale_if_error_serves_when_the_origin_is_down() {
    let d = TempDir::new("cache-sie");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let ok = "/s?cc=max-age=1,stale-if-error=60";
    let strict = "/m?cc=max-age=1,must-revalidate,stale-if-error=60";
    let body = srv.get(ok).body;
    srv.get(strict);
    let port = o.stop();
    std::thread::sleep(Duration::from_millis(2100));
    let stale = srv.get(ok);
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, body);
    assert!(status(&stale).contains("detail=stale-if-error"), "{stale:?}");
    assert_eq!(srv.get(strict).status, 502, "must-revalidate: never stale");
    // The origin back: fetched again.
    let o2 = Origin::on(port);
    let fresh = srv.get(ok);
    assert!(status(&fresh).contains("fwd=stale"), "{fresh:?}");
    assert_eq!(o2.count("/s"), 1);
}

#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes() {
    let d = TempDir::new("cache-swr");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    let p = "/w?cc=max-age=1,stale-while-revalidate=60&delay=2000";
    assert_eq!(srv.get(p).text(), "GET /w #1");
    std::thread::sleep(Duration::from_millis(1100));
    let t = Instant::now();
    let stale = srv.get(p);
    assert!(t.elapsed() < Duration::from_millis(1500), "answered without waiting for the origin");
    assert_eq!(stale.text(), "GET /w #1");
    assert!(status(&stale).contains("stale-while-revalidate"));
    eventually(10, "the background revalidation", || o.count("/w") == 2);
    eventually(10, "the refreshed entry", || srv.get(p).text() == "GET /w #2");
}

#[test]
fn purges_by_key_and_prefix_through_the_admin_listener() {
    let d = TempDir::new("cache-purge");
    let o = Origin::start();
    let srv = server(&d, &o, "\"pages\"", "[[cache]]\nname = \"pages\"\nsize = \"1MiB\"", "");
    let admin = admin_addr(&srv);
    for p in ["/p/1?cc=max-age=60", "/p/2?cc=max-age=60", "/q?cc=max-age=60"] {
        srv.get(p);
    }
    let purge = |q: &str, method: &str| {
        request(admin, &format!("{method} /cache/purge?{q} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"))
    };
    assert_eq!(purge("key=http://t/q?cc=max-age=60", "GET").status, 405);
    let r = purge("key=http%3A%2F%2Ft%2Fq%3Fcc%3Dmax-age%3D60", "POST");
    assert_eq!(r.text().trim(), "{\"purged\":1}");
    let r = purge("zone=pages&prefix=http://t/p/", "POST");
    assert_eq!(r.text().trim(), "{\"purged\":2}");
    assert_eq!(purge("", "POST").status, 400);
    assert_eq!(purge("prefix=", "POST").status, 400, "an empty prefix is no way to empty every zone");
    assert_eq!(purge("key=", "POST").status, 400);
    assert_eq!(purge("zone=nope&key=x", "POST").status, 404);
    for p in ["/p/1?cc=max-age=60", "/q?cc=max-age=60"] {
        assert!(status(&srv.get(p)).contains("fwd=uri-miss"));
    }
    assert_eq!(metric(admin, "selvedge_cache_entries{zone=\"pages\"}"), 2);
    // The status page's numbers.
    let st = request(admin, "GET /status.json HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    let zone = &v["http_cache"][0];
    assert_eq!(zone["zone"], "pages");
    assert_eq!(zone["entries"], 2);
    assert_eq!(zone["misses"], 5);
    assert_eq!(zone["stored"], 5);
}

#[test]
fn the_disk_tier_keeps_entries_across_a_restart() {
    let d = TempDir::new("cache-disk");
    let o = Origin::start();
    let zone = format!(
        "[[cache]]\nname = \"disk\"\nsize = \"1MiB\"\npath = \"{}\"\nmemory_entry_size = \"4KiB\"",
        d.path().join("store").display()
    );
    let big = "/big?cc=max-age=600&size=300000&chunked=1";
    let small = "/small?cc=max-age=600";
    let (b1, s1) = {
        let srv = server(&d, &o, "\"disk\"", &zone, "");
        // Chunked from the origin (this client does not decode it), with a length from the file.
        assert_eq!(srv.get(big).status, 200);
        let hit = srv.get(big);
        assert_eq!(hit.body.len(), 300_000, "a large body served from its file");
        assert!(hit.body.starts_with(b"0123456789abcdef"));
        assert!(status(&hit).contains("hit"));
        (hit.body, srv.get(small).body)
    };
    // A third entry, then its file cut short while the server is down: never read back.
    {
        let srv = server(&d, &o, "\"disk\"", &zone, "");
        srv.get("/cut?cc=max-age=600&size=100000");
    }
    let store = d.path().join("store");
    let cut = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 90_000 && m.len() < 200_000))
        .expect("the cut entry's file");
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(60_000).unwrap();
    drop(f);
    let srv = server(&d, &o, "\"disk\"", &zone, "");
    assert!(srv.said("2 entries read back"), "{:?}", srv.stderr.lock().unwrap());
    assert!(!cut.exists(), "a file cut short is removed");
    assert!(status(&srv.get("/cut?cc=max-age=600&size=100000")).contains("fwd=uri-miss"));
    let b2 = srv.get(big);
    assert!(status(&b2).contains("hit"), "{b2:?}");
    assert_eq!(b2.body, b1);
    assert_eq!(srv.get(small).body, s1);
    assert_eq!(o.count("/big"), 1);
    assert_eq!(o.count("/small"), 1);
}

/// Bytes of the files under `dir`.
fn du(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |rd| rd.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
}

#[test]
fn the_disk_tier_keeps_to_its_own_directory_and_files() {
    let d = TempDir::new("cache-dir");
    let o = Origin::start();
    let dir = d.path().join("site");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "important").unwrap();
    let zone = format!("[[cache]]\nname = \"z\"\npath = \"{}\"", dir.display());
    let cfg = d.write(
        "s.toml",
        format!(
            "[[listen]]\nport = 0\n{zone}\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\n\
             proxy = {{ upstream = \"http://127.0.0.1:{}\" }}\ncache = \"z\"\n",
            o.port
        ),
    );
    let out = Command::new(common::bin()).args(["check", "--config", cfg.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is not empty and is no cache directory"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "important");
    // Two zones on one directory.
    let two = "[[cache]]\nname = \"a\"\npath = \"x\"\n[[cache]]\nname = \"b\"\npath = \"x\"\n[[vhost]]\n";
    let cfg = d.write("two.toml", two);
    let out = Command::new(common::bin()).args(["check", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("each zone needs a directory of its own"));
    // The same directory through a symlink and a `..`.
    std::fs::create_dir_all(d.path().join("real")).unwrap();
    std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
    let spelled = format!(
        "[[cache]]\nname = \"a\"\npath = \"real\"\n[[cache]]\nname = \"b\"\npath = \"link\"\n\
         [[cache]]\nname = \"c\"\npath = \"real/../real\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\n\
         proxy = {{ upstream = \"http://127.0.0.1:{p}\" }}\ncache = \"a\"\n[[vhost.route]]\npath = \"/b\"\n\
         proxy = {{ upstream = \"http://127.0.0.1:{p}\" }}\ncache = \"b\"\n",
        p = o.port
    );
    let cfg = d.write("spelled.toml", spelled);
    let out = Command::new(common::bin()).args(["check", "--config", cfg.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("each zone needs a directory of its own"), "{err}");
    // A marked directory: the server's own files come and go, others stay.
    let store = d.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join(".selvedge-cache"), "").unwrap();
    std::fs::write(store.join("README"), "mine").unwrap();
    let zone = format!("[[cache]]\nname = \"z\"\npath = \"{}\"", store.display());
    let srv = server(&d, &o, "\"z\"", &zone, "");
    srv.get("/f?cc=max-age=60");
    assert!(status(&srv.get("/f?cc=max-age=60")).contains("hit"));
    drop(srv);
    let srv = server(&d, &o, "\"z\"", &zone, "");
    assert!(status(&srv.get("/f?cc=max-age=60")).contains("hit"));
    assert_eq!(std::fs::read_to_string(store.join("README")).unwrap(), "mine");
}

#[test]
fn large_entries_are_stored_and_files_being_written_count_against_the_disk() {
    let d = TempDir::new("cache-large");
    let o = Origin::start();
    let store = d.path().join("store");
    let zone = format!(
        "[[cache]]\nname = \"z\"\nsize = \"1MiB\"\npath = \"{}\"\ndisk_size = \"2MiB\"\nmax_entry_size = \"1MiB\"",
        store.display()
    );
    let srv = server(&d, &o, "\"z\"", &zone, "");
    // Larger than a sixteenth of the zone: stored all the same.
    srv.get("/big?cc=max-age=60&size=700000");
    assert!(status(&srv.head_of("/big?cc=max-age=60&size=700000", &[])).contains("hit"));
    // Ten slow clients each pulling a 600 KB body that is being stored: the files being
    // written stay within disk_size (the ones that would pass it are not stored).
    let mut held = Vec::new();
    for i in 0..10 {
        let mut s = common::connect(srv.addr);
        use std::io::{Read, Write};
        write!(s, "GET /slow{i}?cc=max-age=60&size=600000&chunked=1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut b = [0u8; 1024];
        let _ = s.read(&mut b).unwrap();
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let used = du(&store);
    assert!(used <= 2 * 1024 * 1024 + 16 * 1024, "{used} bytes on disk");
    // Files being written take at most half the tier: what was stored is still there.
    assert!(status(&srv.head_of("/big?cc=max-age=60&size=700000", &[])).contains("hit"));
    drop(held);
}

#[test]
fn limits_hold_while_ten_times_the_size_is_stored() {
    let d = TempDir::new("cache-limits");
    let o = Origin::start();
    let store = d.path().join("store");
    let zone = format!(
        "[[cache]]\nname = \"z\"\nsize = \"256KiB\"\npath = \"{}\"\ndisk_size = \"1MiB\"\nmemory_entry_size = \"8KiB\"",
        store.display()
    );
    let srv = server(&d, &o, "\"z\"", &zone, "");
    let admin = admin_addr(&srv);
    // 10 MiB through a 1 MiB disk tier, 2.5 MiB of small bodies through 256 KiB of memory.
    for i in 0..160 {
        srv.get(&format!("/l/{i}?cc=max-age=600&size=65536"));
        srv.get(&format!("/m/{i}?cc=max-age=600&size=8000"));
        if i % 40 == 39 {
            assert!(metric(admin, "selvedge_cache_memory_bytes") <= 256 * 1024);
            assert!(du(&store) <= 1024 * 1024 + 64 * 1024, "{} on disk", du(&store));
        }
    }
    assert!(metric(admin, "selvedge_cache_evictions_total") > 100);
    // Recent entries are still there.
    assert!(status(&srv.get("/m/159?cc=max-age=600&size=8000")).contains("hit"));
    // An entry over max_entry_size is not stored.
    let huge = "/huge?cc=max-age=600&size=200000";
    srv.get(huge);
    assert!(status(&srv.get(huge)).contains("detail=too-large"));
}

#[test]
fn broken_bodies_are_not_stored() {
    let d = TempDir::new("cache-broken");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\" }", "", "");
    for p in ["/b1?cc=max-age=60&size=200000&break=1", "/b2?cc=max-age=60&size=2000&chunked=1&break=1"] {
        srv.get(p);
        let again = srv.get(p);
        assert!(status(&again).contains("fwd=uri-miss"), "{p}: {again:?}");
    }
    assert_eq!(o.count("/b1"), 2);
    assert_eq!(o.count("/b2"), 2);
}

#[test]
fn route_checks_run_before_a_hit() {
    let d = TempDir::new("cache-checks");
    let o = Origin::start();
    let hash = bcrypt::hash("pw", 4).unwrap();
    let users = d.write("users", format!("u:{hash}\n"));
    let srv = server(
        &d,
        &o,
        "{ size = \"1MiB\" }",
        "",
        &format!("auth = {{ realm = \"r\", htpasswd = \"{}\" }}\ndeny = [\"10.0.0.0/8\"]", users.display()),
    );
    let cred = ("Authorization", "Basic dTpwdw==");
    let p = "/z?cc=max-age=60,public";
    assert_eq!(srv.get_h(p, &[cred]).status, 200);
    assert!(status(&srv.get_h(p, &[cred])).contains("hit"));
    let anon = srv.get(p);
    assert_eq!(anon.status, 401, "a stored answer is no way around the route's auth");
    assert_eq!(srv.get_h(p, &[("Authorization", "Basic dTp4")]).status, 401);
}

#[test]
fn cache_settings_are_checked_where_written() {
    let d = TempDir::new("cache-config");
    let check = |body: &str| {
        let cfg = d.write("c.toml", body);
        let out = Command::new(common::bin()).args(["check", "--config", cfg.to_str().unwrap()]).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let route = "[[vhost]]\n[[vhost.route]]\npath = \"/\"\n";
    let (ok, err) = check(&format!("{route}root = \".\"\ncache = {{ size = \"1MiB\" }}\n"));
    assert!(!ok && err.contains("c.toml:5:") && err.contains("proxy and FastCGI routes"), "{err}");
    let (ok, err) = check(&format!("{route}proxy = {{ upstream = \"http://127.0.0.1:1\" }}\ncache = \"nope\"\n"));
    assert!(!ok && err.contains("\"nope\" is not defined"), "{err}");
    let (ok, err) = check(&format!(
        "[[cache]]\nname = \"a\"\nsize = \"1MiB\"\n{route}proxy = {{ upstream = \"http://127.0.0.1:1\" }}\n\
         cache = {{ zone = \"a\", size = \"2MiB\" }}\n"
    ));
    assert!(!ok && err.contains("configured in its [[cache]] table"), "{err}");
    let (ok, err) = check("[[cache]]\nsize = \"1MiB\"\n[[vhost]]\n");
    assert!(!ok && err.contains("c.toml:1:") && err.contains("needs a `name`"), "{err}");
    let (ok, err) = check(&format!(
        "[cache]\nmax_age = \"1h\"\n[[cache.zone]]\nname = \"a\"\nheuristic = 0.1\n{route}\
         proxy = {{ upstream = \"http://127.0.0.1:1\" }}\ncache = \"a\"\n"
    ));
    assert!(ok, "{err}");
}

#[test]
fn a_fastcgi_route_is_cached_and_logged_in_users_bypass_it() {
    let d = TempDir::new("cache-fcgi");
    let fpm = common::fpm::Fpm::start(&d, 2);
    let root = d.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let counter = d.path().join("count");
    std::fs::write(
        root.join("page.php"),
        format!(
            "<?php $f = '{}'; $n = (int)@file_get_contents($f) + 1; file_put_contents($f, $n);\n\
             header('Cache-Control: public, max-age=60'); echo \"page #$n\";\n",
            counter.display()
        ),
    )
    .unwrap();
    let cfg = d.write(
        "s.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[cache]]\nname = \"php\"\nsize = \"1MiB\"\n\
             [[vhost]]\n[vhost.matchers.logged_in]\nheader_regex = {{ \"Cookie\" = \"wordpress_logged_in_\" }}\n\
             [[vhost.route]]\npath = \"/\"\n\
             fastcgi = {{ address = \"unix:{}\", root = \"{}\" }}\ncache = {{ zone = \"php\", bypass = \"logged_in\" }}\n",
            fpm.sock.display(),
            root.display()
        ),
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(srv.get("/page.php").text(), "page #1");
    let hit = srv.get("/page.php");
    assert_eq!(hit.text(), "page #1");
    assert!(status(&hit).contains("hit"), "{hit:?}");
    let user = srv.get_h("/page.php", &[("Cookie", "wordpress_logged_in_abc=1")]);
    assert_eq!(user.text(), "page #2", "a logged-in user sees the application");
    assert!(status(&user).contains("fwd=bypass"));
    assert_eq!(srv.get("/page.php").text(), "page #1");
}

#[test]
fn min_uses_stores_a_key_once_it_is_asked_for_enough() {
    let d = TempDir::new("cache-min-uses");
    let o = Origin::start();
    let srv = server(&d, &o, "{ size = \"1MiB\", min_uses = 3 }", "", "");
    let p = "/m?cc=max-age=60";
    for _ in 0..2 {
        assert!(status(&srv.get(p)).contains("detail=min-uses"));
    }
    assert!(status(&srv.get(p)).contains("stored"));
    assert!(status(&srv.get(p)).contains("hit"));
    assert_eq!(o.count("/m"), 3);
}
