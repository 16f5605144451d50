//! Static file behaviour over real sockets: index, MIME, HEAD, 405, redirects, ranges,
//! conditionals, precompressed siblings, path safety, error pages.

mod common;

use common::{request, Srv, TempDir};

fn site() -> TempDir {
    let d = TempDir::new("static");
    d.write("index.html", "<h1>home</h1>\n");
    d.write("a.txt", "0123456789");
    d.write("style.css", "body { color: red }\n");
    d.write("style.css.gz", "GZ-BYTES");
    d.write("style.css.br", "BR-BYTES");
    d.write("only.js", "js();\n");
    d.write("only.js.gz", "GZ-JS");
    d.write("logo.SVG", "<svg/>");
    d.write("blob.weird", "x");
    d.write("sub/index.html", "sub index\n");
    d.write("empty/.keep", "");
    d.write(".secret", "hidden");
    d.write("sub/.env", "hidden");
    d
}

fn serve(d: &TempDir) -> Srv {
    Srv::start(&["serve", d.path().to_str().unwrap(), "--port", "0", "--workers", "1"])
}

#[test]
fn basics_index_mime_head_405() {
    let d = site();
    let s = serve(&d);
    let r = s.get("/");
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>home</h1>\n"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.header("etag").unwrap().starts_with('"'));
    assert!(r.header("last-modified").unwrap().ends_with(" GMT"));
    assert_eq!(s.get("/logo.SVG").header("content-type"), Some("image/svg+xml"));
    assert_eq!(s.get("/blob.weird").header("content-type"), Some("application/octet-stream"));
    assert_eq!(s.get("/missing").status, 404);
    // `serve` lists a directory without an index (like miniserve); `--no-listing` is a 404.
    let r = s.get("/empty/");
    assert_eq!((r.status, r.header("content-type")), (200, Some("text/html; charset=utf-8")));
    assert!(r.text().contains("Index of /empty/"), "{}", r.text());

    let r = s.get("/sub");
    assert_eq!((r.status, r.header("location")), (301, Some("/sub/")));
    let r = s.get("/sub?x=1");
    assert_eq!(r.header("location"), Some("/sub/?x=1"));
    assert_eq!(s.get("/sub/").text(), "sub index\n");

    let r = request(s.addr, "HEAD /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.header("content-length")), (200, Some("10")));
    assert!(r.body.is_empty());
    for m in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = request(
            s.addr,
            &format!("{m} /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")), "{m}");
    }
}

#[test]
fn ranges() {
    let d = site();
    let s = serve(&d);
    let r = s.get_h("/a.txt", &[("Range", "bytes=2-4")]);
    assert_eq!((r.status, r.text().as_str()), (206, "234"));
    assert_eq!(r.header("content-range"), Some("bytes 2-4/10"));
    assert_eq!(s.get_h("/a.txt", &[("Range", "bytes=-3")]).text(), "789");
    assert_eq!(s.get_h("/a.txt", &[("Range", "bytes=7-")]).text(), "789");
    assert_eq!(s.get_h("/a.txt", &[("Range", "bytes=8-100")]).text(), "89");

    // Ranges close together (within a part head's cost) are one range.
    let r = s.get_h("/a.txt", &[("Range", "bytes=0-1, 5-6")]);
    assert_eq!((r.status, r.text().as_str()), (206, "0123456"));
    assert_eq!(r.header("content-range"), Some("bytes 0-6/10"));

    // Ranges apart: multipart/byteranges, in order, with its length, streamed from the file
    // (a large one, so not from the cache's memory) or from memory (a small one).
    let digits: String = (0..5000).map(|i| char::from(b'0' + (i % 10) as u8)).collect();
    d.write("big.txt", &digits);
    let small: String = digits[..1000].to_string();
    d.write("small.txt", &small);
    for (path, size) in [("/big.txt", 5000), ("/small.txt", 1000)] {
        let r = s.get_h(path, &[("Range", "bytes=900-909, 0-1, 500-502")]);
        assert_eq!(r.status, 206, "{path}");
        let ct = r.header("content-type").unwrap();
        let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect(ct);
        let body = r.text();
        assert_eq!(r.header("content-length"), Some(body.len().to_string().as_str()), "{path}");
        assert_eq!(body.matches(&format!("--{boundary}\r\n")).count(), 3, "{body}");
        let first = body.find(&format!("bytes 0-1/{size}\r\n\r\n01\r\n")).expect(&body);
        let second = body.find(&format!("bytes 500-502/{size}\r\n\r\n012\r\n")).expect(&body);
        let third = body.find(&format!("bytes 900-909/{size}\r\n\r\n0123456789\r\n")).expect(&body);
        assert!(first < second && second < third, "in order: {body}");
        assert!(body.ends_with(&format!("--{boundary}--\r\n")));
    }
    // Overlapping ranges are merged; a set asking for more than the whole file (sixteen
    // `0-`, range amplification) gets the whole file once, 200.
    let r = s.get_h("/big.txt", &[("Range", "bytes=10-19, 15-29")]);
    assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 10-29/5000")));
    let all = vec!["0-"; 16].join(",");
    let r = s.get_h("/big.txt", &[("Range", &format!("bytes={all}"))]);
    assert_eq!((r.status, r.body.len()), (200, 5000));

    let r = s.get_h("/a.txt", &[("Range", "bytes=10-")]);
    assert_eq!((r.status, r.header("content-range")), (416, Some("bytes */10")));
    // Malformed or foreign units: ignored, the whole file.
    for v in ["bytes=5-1", "lines=1-2", "bytes=x-"] {
        let r = s.get_h("/a.txt", &[("Range", v)]);
        assert_eq!((r.status, r.text().as_str()), (200, "0123456789"), "{v}");
    }
    // If-Range: matching validator applies the range, another sends the whole file.
    let etag = s.get("/a.txt").header("etag").unwrap().to_string();
    let lm = s.get("/a.txt").header("last-modified").unwrap().to_string();
    assert_eq!(s.get_h("/a.txt", &[("Range", "bytes=0-0"), ("If-Range", &etag)]).status, 206);
    assert_eq!(s.get_h("/a.txt", &[("Range", "bytes=0-0"), ("If-Range", &lm)]).status, 206);
    let r = s.get_h("/a.txt", &[("Range", "bytes=0-0"), ("If-Range", "\"stale\"")]);
    assert_eq!((r.status, r.body.len()), (200, 10));
    // Ranges on a large file go out with sendfile.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    d.write("big.bin", &big);
    let r = s.get_h("/big.bin", &[("Range", "bytes=100000-100009")]);
    assert_eq!(r.body, &big[100_000..100_010]);
    // HEAD ignores Range.
    let r = request(s.addr, "HEAD /a.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
}

#[test]
fn conditionals() {
    let d = site();
    let s = serve(&d);
    let first = s.get("/a.txt");
    let etag = first.header("etag").unwrap();
    let lm = first.header("last-modified").unwrap();
    let r = s.get_h("/a.txt", &[("If-None-Match", etag)]);
    assert_eq!((r.status, r.header("etag"), r.body.len()), (304, Some(etag), 0));
    assert_eq!(s.get_h("/a.txt", &[("If-None-Match", &format!("\"x\", W/{etag}"))]).status, 304);
    assert_eq!(s.get_h("/a.txt", &[("If-None-Match", "*")]).status, 304);
    assert_eq!(s.get_h("/a.txt", &[("If-None-Match", "\"other\"")]).status, 200);
    assert_eq!(s.get_h("/a.txt", &[("If-Modified-Since", lm)]).status, 304);
    assert_eq!(s.get_h("/a.txt", &[("If-Modified-Since", "Thu, 01 Jan 1970 00:00:00 GMT")]).status, 200);
    assert_eq!(s.get_h("/a.txt", &[("If-Modified-Since", "not a date")]).status, 200);
    // If-None-Match takes precedence over If-Modified-Since.
    assert_eq!(s.get_h("/a.txt", &[("If-None-Match", "\"other\""), ("If-Modified-Since", lm)]).status, 200);
    assert_eq!(s.get_h("/a.txt", &[("If-Match", "\"other\"")]).status, 412);
    assert_eq!(s.get_h("/a.txt", &[("If-Match", etag)]).status, 200);
    assert_eq!(s.get_h("/a.txt", &[("If-Unmodified-Since", "Thu, 01 Jan 1970 00:00:00 GMT")]).status, 412);
}

#[test]
fn precompressed_negotiation() {
    let d = site();
    let s = serve(&d);
    let r = s.get_h("/style.css", &[("Accept-Encoding", "gzip, deflate, br")]);
    assert_eq!((r.text().as_str(), r.header("content-encoding")), ("BR-BYTES", Some("br")));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    let br_etag = r.header("etag").unwrap().to_string();
    let r = s.get_h("/style.css", &[("Accept-Encoding", "gzip")]);
    assert_eq!((r.text().as_str(), r.header("content-encoding")), ("GZ-BYTES", Some("gzip")));
    assert_ne!(r.header("etag").unwrap(), br_etag);
    let r = s.get_h("/style.css", &[("Accept-Encoding", "br;q=0, gzip;q=0.5")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let r = s.get("/style.css");
    assert_eq!((r.text().as_str(), r.header("content-encoding")), ("body { color: red }\n", None));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = s.get_h("/only.js", &[("Accept-Encoding", "br, gzip")]);
    assert_eq!(r.text(), "GZ-JS");
    // A conditional on the variant's tag answers 304 for that variant.
    assert_eq!(s.get_h("/style.css", &[("Accept-Encoding", "br"), ("If-None-Match", &br_etag)]).status, 304);
    // Files with no sibling carry no Vary.
    assert_eq!(s.get("/a.txt").header("vary"), None);
    // curl agrees (it decodes nothing here: the bytes are fake).
    let out = std::process::Command::new("curl")
        .args(["-s", "-H", "Accept-Encoding: br", &format!("http://{}/style.css", s.addr)])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"BR-BYTES");
}

#[test]
fn path_safety() {
    let d = site();
    let outside = TempDir::new("outside");
    outside.write("passwd", "root:x:0:0");
    std::os::unix::fs::symlink(outside.path().join("passwd"), d.path().join("link-out")).unwrap();
    std::os::unix::fs::symlink(d.path().join("a.txt"), d.path().join("link-in")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("dir-out")).unwrap();
    let s = serve(&d);
    let raw = |target: &str| request(s.addr, &format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
    for t in [
        "/../outside/passwd",
        "/sub/../../x",
        "/%2e%2e/x",
        "/%2E%2E/%2e%2e/etc/passwd",
        "/sub/%2e%2e/%2e%2e/x",
        "/..%2fx",
        "/sub%2f..%2f..%2fx",
        "/a.txt%00.html",
        "/..%5c..%5cx",
    ] {
        let r = raw(t);
        assert!(r.status == 400 || r.status == 404, "{t} -> {}", r.status);
        assert!(!r.text().contains("root:"), "{t}");
    }
    assert_eq!(raw("/.secret").status, 404);
    assert_eq!(raw("/sub/.env").status, 404);
    assert_eq!(raw("/%2esecret").status, 404);
    assert_eq!(raw("/link-out").status, 404);
    assert_eq!(raw("/dir-out/passwd").status, 404);
    assert_eq!(raw("/link-in").text(), "0123456789");
    assert_eq!(raw("/a%2etxt").text(), "0123456789");
    // Dot-segments inside the root resolve to the file they name (RFC 3986 §5.2.4).
    assert_eq!(raw("/./a.txt").text(), "0123456789");
    assert_eq!(raw("/sub/../a.txt").text(), "0123456789");
    drop(s);

    // With the setting, symlinks may leave the root (and dotfiles can be allowed).
    let cfg = d.write(
        "cfg/selvedge.toml",
        format!(
            "[[listen]]\nport = 0\n[server]\nworkers = 1\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n\
             symlinks_outside = true\ndotfiles = true\n",
            d.path().display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(s.get("/link-out").text(), "root:x:0:0");
    assert_eq!(s.get("/.secret").text(), "hidden");
    assert_eq!(s.get("/%2e%2e/x").status, 400);
}

#[test]
fn vhosts_routes_and_error_pages() {
    let d = site();
    let other = TempDir::new("other");
    other.write("index.html", "other host\n");
    other.write("404.html", "<p>custom 404</p>");
    other.write("400.html", "<p>custom 400</p>");
    let docs = TempDir::new("docs");
    docs.write("guide.txt", "the guide");
    let cfg = d.write(
        "cfg/selvedge.toml",
        format!(
            "[[listen]]\nport = 0\n[server]\nworkers = 1\n[cache]\nmax_age = 60\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\nerror_pages = {{ 400 = \"{}\" }}\n\
             [[vhost.route]]\npath = \"/docs\"\nroot = \"{}\"\n\
             [[vhost]]\nhosts = [\"Other.Example\"]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n\
             error_pages = {{ 404 = \"{}\" }}\n",
            d.path().display(),
            other.path().join("400.html").display(),
            docs.path().display(),
            other.path().display(),
            other.path().join("404.html").display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(s.get("/").text(), "<h1>home</h1>\n");
    assert_eq!(s.get("/").header("cache-control"), Some("max-age=60"));
    assert_eq!(s.get("/docs/guide.txt").text(), "the guide");
    assert_eq!(s.get("/docs").header("location"), Some("/docs/"));
    assert_eq!(s.get("/docsx").status, 404);
    let host =
        |h: &str, p: &str| request(s.addr, &format!("GET {p} HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n"));
    assert_eq!(host("other.example:8080", "/").text(), "other host\n");
    assert_eq!(host("OTHER.EXAMPLE", "/").text(), "other host\n");
    let r = host("other.example", "/nope");
    assert_eq!((r.status, r.text().as_str()), (404, "<p>custom 404</p>"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(host("unknown.example", "/a.txt").text(), "0123456789");
    // The engine's own answers (here a 400 for a request without Host) use the default
    // host's pages; a route's 400 too (an encoded slash).
    let r = request(s.addr, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (400, "<p>custom 400</p>"));
    assert_eq!(s.get("/a%2fb").text(), "<p>custom 400</p>");
}

/// A whole file's fields are rendered once per file and kept with the cached file; two
/// routes serving the same file (one file cache) with different settings must still each
/// send their own, however their requests interleave, and a changed file new ones.
#[test]
fn routes_sharing_a_file_send_their_own_fields() {
    let d = site();
    let cfg = d.write(
        "cfg/selvedge.toml",
        format!(
            "[[listen]]\nport = 0\n[server]\nworkers = 1\n[file_cache]\nsweep_ms = 100\n[cache]\nmax_age = 60\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}\"\n\
             [[vhost]]\nhosts = [\"short.example\"]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}\"\nmax_age = 5\n",
            d.path().display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let get = |host: &str, path: &str| {
        request(
            s.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"),
        )
    };
    for _ in 0..3 {
        for (host, age) in [("default.example", "max-age=60"), ("short.example", "max-age=5")] {
            let r = get(host, "/a.txt");
            assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
            assert_eq!(r.header("cache-control"), Some(age), "{host}");
            assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
            // The precompressed sibling has fields of its own (encoding, Vary).
            let r = get(host, "/style.css");
            assert_eq!((r.text().as_str(), r.header("content-encoding")), ("GZ-BYTES", Some("gzip")));
            assert_eq!((r.header("cache-control"), r.header("vary")), (Some(age), Some("Accept-Encoding")));
        }
    }
    // The file changes on disk: within a sweep both routes send the new validators.
    let old = get("default.example", "/a.txt").header("etag").unwrap().to_string();
    std::thread::sleep(std::time::Duration::from_millis(20));
    d.write("a.txt", "changed, longer");
    let mut fresh = false;
    for _ in 0..100 {
        let a = get("default.example", "/a.txt");
        let b = get("short.example", "/a.txt");
        if a.text() == "changed, longer" && b.text() == "changed, longer" {
            assert_ne!(a.header("etag").unwrap(), old);
            assert_eq!(a.header("etag"), b.header("etag"));
            assert_eq!(a.header("content-length"), Some("15"));
            fresh = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(fresh, "the change was not seen within 2 s");
}
