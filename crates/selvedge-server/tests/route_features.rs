//! Everyday route features over real sockets, each on HTTP/1.1 and HTTP/2 (curl, with
//! `--http2-prior-knowledge` for h2c): directory listings (hostile names, a 100,000-entry
//! directory), the SPA fallback, redirects and rewrites (and their loops), response
//! headers, CORS, on-the-fly compression (kept copies of static files, a streamed proxy
//! response), and a listing and a SPA deep link in headless Chromium over HTTP/2.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

const BOTH: [Proto; 2] = [Proto::H1, Proto::H2];

/// A server with one worker on port 0 and the given `[[vhost]]` tables (and more).
fn start(d: &TempDir, toml: &str) -> Srv {
    let cfg = d.write("selvedge.toml", format!("[server]\nworkers = 1\n[[listen]]\nport = 0\n{toml}"));
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

/// One request with curl (`-i`, the path sent as is), parsed.
fn fetch(p: Proto, srv: &Srv, path: &str, args: &[&str]) -> Resp {
    let flag = match p {
        Proto::H1 => "--http1.1",
        Proto::H2 => "--http2-prior-knowledge",
    };
    let out = Command::new("curl")
        .args(["-sS", "-i", "-g", "--path-as-is", "--max-time", "30", flag])
        .args(args)
        .arg(format!("http://{}{path}", srv.addr))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {path}: {}", String::from_utf8_lossy(&out.stderr));
    let head_only = args.contains(&"-I");
    let r = parse(&out.stdout, !head_only).unwrap_or_else(|| panic!("no response: {:?}", out.stdout));
    let version = if p == Proto::H2 { "HTTP/2" } else { "HTTP/1.1" };
    assert!(out.stdout.starts_with(version.as_bytes()), "{p:?}: {}", String::from_utf8_lossy(&out.stdout));
    r
}

/// Every value of a field (a field may come several times, like `Vary`).
fn all(r: &Resp, name: &str) -> Vec<String> {
    r.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()).collect()
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).expect("gzip");
    out
}

fn unbrotli(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(b, 4096).read_to_end(&mut out).expect("brotli");
    out
}

#[test]
fn listings_escape_hostile_names_and_link_to_them() {
    let d = TempDir::new("listing");
    let files: &[(&[u8], &str)] = &[
        (b"<script>alert(\"x\")&'.txt", "xss"),
        (b"a b.txt", "space"),
        (b"100%.txt", "percent"),
        (b"caf\xe9 \xff.txt", "latin-1"),
        ("café.txt".as_bytes(), "utf-8"),
        (b".hidden", "dot"),
        (b"sub dir/inner.txt", "inner"),
        (b"big.txt", ""),
    ];
    for (name, text) in files {
        let p = d.path().join("site").join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, if text.is_empty() { "x".repeat(5000) } else { text.to_string() }).unwrap();
    }
    let srv = start(&d, "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nlisting = true\n");
    for p in BOTH {
        let r = fetch(p, &srv, "/", &[]);
        assert_eq!(r.status, 200, "{p:?}");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let page = r.text();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&amp;&#39;.txt"), "{page}");
        for href in
            ["%3Cscript%3Ealert%28%22x%22%29%26%27.txt", "a%20b.txt", "100%25.txt", "caf%C3%A9.txt", "sub%20dir/"]
        {
            assert!(page.contains(&format!("href=\"{href}\"")), "{href} in {page}");
        }
        // A name that is not UTF-8 cannot be asked for (its path is a 400): not listed.
        assert!(!page.contains("latin"), "{page}");
        assert!(!page.contains("caf%E9") && !page.contains('\u{fffd}'), "{page}");
        assert_eq!(fetch(p, &srv, "/caf%E9%20%FF.txt", &[]).status, 400);
        assert!(!page.contains("hidden"), "dotfiles are hidden");
        assert!(!page.contains("href=\"../\""), "no parent link at the root");
        assert!(page.find("sub%20dir/").unwrap() < page.find("a%20b.txt").unwrap(), "directories first");
        // Every link leads to its file.
        for (href, want) in [
            ("%3Cscript%3Ealert%28%22x%22%29%26%27.txt", "xss"),
            ("a%20b.txt", "space"),
            ("100%25.txt", "percent"),
            ("caf%C3%A9.txt", "utf-8"),
            ("sub%20dir/inner.txt", "inner"),
        ] {
            let f = fetch(p, &srv, &format!("/{href}"), &[]);
            assert_eq!((f.status, f.text().as_str()), (200, want), "{href}");
        }
        let sub = fetch(p, &srv, "/sub%20dir/", &[]).text();
        assert!(sub.contains("href=\"../\"") && sub.contains("href=\"inner.txt\""), "{sub}");
        assert!(sub.contains("Index of /sub dir/"), "{sub}");
        // JSON by Accept, same order rules; sorting by size, descending.
        let j = fetch(p, &srv, "/?sort=size&order=desc", &["-H", "Accept: application/json"]);
        assert_eq!(j.header("content-type"), Some("application/json"));
        let v: serde_json::Value = serde_json::from_slice(&j.body).unwrap();
        let names: Vec<&str> = v.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names[0], "sub dir");
        assert_eq!(names[1], "big.txt", "the largest file first: {names:?}");
        assert_eq!(names.len(), 6);
        assert!(names.contains(&"<script>alert(\"x\")&'.txt") && names.contains(&"café.txt"));
        assert_eq!(v[0]["type"], "dir");
        assert!(v[0]["size"].is_null());
        assert_eq!(v[1]["size"], 5000);
        assert!(v[1]["modified"].as_str().unwrap().ends_with('Z'));
        // HEAD gets the page's fields and no body.
        let h = fetch(p, &srv, "/", &["-I"]);
        assert_eq!((h.status, h.header("content-type")), (200, Some("text/html; charset=utf-8")));
    }
}

#[test]
fn a_huge_directory_is_listed_within_its_bound() {
    let d = TempDir::new("listing-huge");
    let dir = d.path().join("site/many");
    std::fs::create_dir_all(&dir).unwrap();
    let t = Instant::now();
    for i in 0..100_000 {
        std::fs::File::create(dir.join(format!("f{i:06}"))).unwrap();
    }
    eprintln!("100,000 files made in {:?}", t.elapsed());
    let srv =
        start(&d, "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\nlisting = true\nlisting_max = 1000\n");
    for p in BOTH {
        let t = Instant::now();
        let r = fetch(p, &srv, "/many/", &[]);
        let took = t.elapsed();
        assert_eq!(r.status, 200);
        let page = r.text();
        assert_eq!(page.matches("<tr><td class=\"n\">").count(), 1001, "1,000 entries and the parent link");
        assert!(
            page.contains("This directory has 100000 entries: only 1000 are listed"),
            "{}",
            &page[page.len() - 300..]
        );
        assert!(page.len() < 300_000, "{} bytes", page.len());
        assert!(took < Duration::from_secs(5), "{took:?}");
        let j = fetch(p, &srv, "/many/", &["-H", "Accept: application/json"]);
        let v: serde_json::Value = serde_json::from_slice(&j.body).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1000);
        assert_eq!(j.header("x-listing-truncated"), Some("shown=1000; total=100000"));
    }
}

#[test]
fn serve_lists_directories_and_a_config_route_only_when_asked() {
    let d = TempDir::new("listing-default");
    d.write("site/sub/a.txt", "a");
    let srv = Srv::start(&["serve", d.path().join("site").to_str().unwrap(), "--port", "0"]);
    let r = srv.get("/sub/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("href=\"a.txt\""), "{}", r.text());
    drop(srv);
    let cfg = start(&d, "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n");
    assert_eq!(cfg.get("/sub/").status, 404);
    assert_eq!(cfg.get("/sub/a.txt").status, 200);
}

#[test]
fn serve_flags_for_route_features() {
    let d = TempDir::new("serve-flags");
    d.write("site/index.html", "<html>shell</html>\n");
    d.write("site/sub/a.js", "let x = 1;\n".repeat(100));
    let sha = "{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="; // "test"
    d.write("users", format!("u:{sha}\n"));
    let site = d.path().join("site");
    let users = d.path().join("users");
    let srv = Srv::start(&[
        "serve",
        site.to_str().unwrap(),
        "--port",
        "0",
        "--spa",
        "index.html",
        "--cors",
        "https://app.example",
        "--header",
        "X-Frame-Options: DENY",
        "--header",
        "-Last-Modified",
        "--no-compress",
        "--no-listing",
        "--auth",
        users.to_str().unwrap(),
    ]);
    let auth = "Authorization: Basic dTp0ZXN0";
    for p in BOTH {
        assert_eq!(fetch(p, &srv, "/deep/link", &[]).status, 401);
        let r =
            fetch(p, &srv, "/deep/link", &["-H", auth, "-H", "Accept: text/html", "-H", "Origin: https://app.example"]);
        assert_eq!((r.status, r.text().as_str()), (200, "<html>shell</html>\n"));
        assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert!(r.header("last-modified").is_none());
        let js = fetch(p, &srv, "/sub/a.js", &["-H", auth, "-H", "Accept-Encoding: br"]);
        assert_eq!((js.status, js.header("content-encoding")), (200, None), "--no-compress");
        assert_eq!(fetch(p, &srv, "/sub/", &["-H", auth]).status, 404, "--no-listing");
    }
}

#[test]
fn spa_fallback_serves_the_app_for_page_requests_only() {
    let d = TempDir::new("fallback");
    let index = "<!DOCTYPE html><html><body><div id=\"app\">the app</div></body></html>\n";
    d.write("site/app/index.html", index);
    d.write("site/app/main.js", "console.log('main')\n");
    d.write("secret.txt", "outside the root\n");
    std::os::unix::fs::symlink(d.path().join("secret.txt"), d.path().join("site/app/link.txt")).unwrap();
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site/app\"\nfallback = \"/index.html\"\ncompress = false\n",
    );
    let html = ["-H", "Accept: text/html,application/xhtml+xml,*/*;q=0.8"];
    for p in BOTH {
        let r = fetch(p, &srv, "/settings/profile?tab=2", &html);
        assert_eq!((r.status, r.text().as_str()), (200, index), "{p:?}");
        assert!(all(&r, "vary").iter().any(|v| v == "Accept"), "{r:?}");
        let etag = r.header("etag").unwrap().to_string();
        // Conditionals and ranges work on the fallback file.
        let c = fetch(p, &srv, "/settings/profile", &[html[0], html[1], "-H", &format!("If-None-Match: {etag}")]);
        assert_eq!(c.status, 304);
        let rg = fetch(p, &srv, "/deep/link", &[html[0], html[1], "-H", "Range: bytes=0-14"]);
        assert_eq!((rg.status, rg.text().as_str()), (206, "<!DOCTYPE html>"));
        // A script's or an image's request for a missing file is a 404, not HTML.
        for accept in ["*/*", "application/javascript", "text/html;q=0"] {
            assert_eq!(fetch(p, &srv, "/missing.js", &["-H", &format!("Accept: {accept}")]).status, 404, "{accept}");
        }
        assert_eq!(fetch(p, &srv, "/missing.js", &["-H", "Accept:"]).status, 404);
        // Existing files are themselves.
        assert_eq!(fetch(p, &srv, "/main.js", &html).text(), "console.log('main')\n");
        // Never for a path outside the root, by dot segments or a link.
        for bad in ["/../secret.txt", "/%2e%2e/secret.txt", "/a/..%2f..%2fsecret.txt", "/..%5csecret.txt"] {
            let r = fetch(p, &srv, bad, &html);
            assert_eq!(r.status, 400, "{bad}");
            assert!(!r.text().contains("the app") && !r.text().contains("outside"), "{bad}");
        }
        let r = fetch(p, &srv, "/link.txt", &html);
        assert_eq!(r.status, 404, "a link leaving the root is not served, nor replaced by the app");
        // Only GET and HEAD.
        assert_eq!(fetch(p, &srv, "/deep", &[html[0], html[1], "-X", "POST"]).status, 405);
        assert_eq!(fetch(p, &srv, "/deep", &[html[0], html[1], "-I"]).status, 200);
    }
}

#[test]
fn redirects_rewrites_and_their_loops() {
    let d = TempDir::new("redirect");
    d.write("site/new/page.html", "new page\n");
    d.write("site/app/index.html", "app shell\n");
    let srv = start(
        &d,
        "[[vhost]]\n\
         [[vhost.redirect]]\nfrom = \"^/old/(.*)$\"\nto = \"/new/$1\"\nstatus = 301\n\
         [[vhost.redirect]]\nfrom = \"^/gone$\"\nto = \"https://example.com/elsewhere?via=gone\"\nstatus = 308\n\
         [[vhost.redirect]]\nfrom = \"^/temp/(?P<rest>.*)$\"\nto = \"/new/${rest}\"\n\
         [[vhost.redirect]]\nfrom = \"^/app/.*$\"\nto = \"/app/index.html\"\nrewrite = true\n\
         [[vhost.redirect]]\nfrom = \"^/short/(.*)$\"\nto = \"/new/$1\"\nrewrite = true\n\
         [[vhost.redirect]]\nfrom = \"^/ping$\"\nto = \"/pong\"\nrewrite = true\n\
         [[vhost.redirect]]\nfrom = \"^/pong$\"\nto = \"/ping\"\nrewrite = true\n\
         [[vhost.redirect]]\nfrom = \"^/x$\"\nto = \"/y\"\nstatus = 302\n\
         [[vhost.redirect]]\nfrom = \"^/y$\"\nto = \"/x\"\nstatus = 302\n\
         [[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    for p in BOTH {
        let r = fetch(p, &srv, "/old/page.html?utm=1", &[]);
        assert_eq!((r.status, r.header("location")), (301, Some("/new/page.html?utm=1")), "{p:?}");
        let r = fetch(p, &srv, "/gone?x=1", &[]);
        assert_eq!((r.status, r.header("location")), (308, Some("https://example.com/elsewhere?via=gone")));
        let r = fetch(p, &srv, "/temp/page.html", &[]);
        assert_eq!((r.status, r.header("location")), (302, Some("/new/page.html")), "302 by default");
        // Rewrites serve another path, the URL unchanged; a rewrite to itself ends the chain.
        assert_eq!(fetch(p, &srv, "/app/deep/link", &[]).text(), "app shell\n");
        assert_eq!(fetch(p, &srv, "/app/index.html", &[]).text(), "app shell\n");
        assert_eq!(fetch(p, &srv, "/short/page.html", &[]).text(), "new page\n");
        // Loops: 500, with a log line naming the chain.
        assert_eq!(fetch(p, &srv, "/ping", &[]).status, 500);
        assert_eq!(fetch(p, &srv, "/x", &[]).status, 500);
    }
    eventually(5, "the loop log lines", || {
        let log = srv.stderr.lock().unwrap().join("\n");
        log.contains("rewrite loop") && log.contains("/ping -> /pong -> /ping") && log.contains("redirect loop")
    });
}

#[test]
fn headers_and_cors_on_every_response() {
    let d = TempDir::new("headers");
    d.write("site/a.txt", "a\n");
    d.write(
        "cgi/info.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\nX-Powered-By: sh\\r\\nX-Keep: 1\\r\\n\\r\\nfrom cgi\\n'\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path().join("cgi/info.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let srv = start(
        &d,
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n\
         headers = { \"X-Frame-Options\" = \"DENY\", \"Content-Security-Policy\" = \"default-src 'self'\", \"-Last-Modified\" = \"\" }\n\
         cors = { origins = [\"https://app.example\"], methods = [\"GET\", \"PUT\"], headers = [\"Content-Type\", \"X-Token\"], credentials = true, max_age = \"10m\", expose = [\"ETag\"] }\n\
         [[vhost.route]]\npath = \"/cgi\"\ncgi = { dir = \"cgi\" }\nheaders = { \"-X-Powered-By\" = \"\", \"X-Frame-Options\" = \"SAMEORIGIN\" }\n\
         [[vhost.route]]\npath = \"/open\"\nroot = \"site\"\ncors = { origins = [\"*\"] }\n",
    );
    for p in BOTH {
        for path in ["/a.txt", "/missing"] {
            let r = fetch(p, &srv, path, &[]);
            assert_eq!(r.header("x-frame-options"), Some("DENY"), "{p:?} {path}");
            assert_eq!(r.header("content-security-policy"), Some("default-src 'self'"));
            assert!(r.header("last-modified").is_none(), "removed");
            assert!(all(&r, "vary").iter().any(|v| v == "Origin"), "{r:?}");
            assert!(r.header("access-control-allow-origin").is_none(), "no Origin, no CORS fields");
        }
        let r = fetch(p, &srv, "/cgi/info.sh", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "from cgi\n"));
        assert!(r.header("x-powered-by").is_none(), "{r:?}");
        assert_eq!((r.header("x-keep"), r.header("x-frame-options")), (Some("1"), Some("SAMEORIGIN")));

        // An allowed origin's request.
        let r = fetch(p, &srv, "/a.txt", &["-H", "Origin: https://app.example"]);
        assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
        assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
        assert_eq!(r.header("access-control-expose-headers"), Some("ETag"));
        let r = fetch(p, &srv, "/missing", &["-H", "Origin: https://app.example"]);
        assert_eq!((r.status, r.header("access-control-allow-origin")), (404, Some("https://app.example")));
        // Another origin's: no CORS fields.
        let r = fetch(p, &srv, "/a.txt", &["-H", "Origin: https://evil.example"]);
        assert_eq!(r.status, 200);
        assert!(r.header("access-control-allow-origin").is_none());

        // Preflights.
        let pre = |origin: &str, method: &str, hdrs: &str| {
            let mut a = vec![
                "-X".to_string(),
                "OPTIONS".into(),
                "-H".into(),
                format!("Origin: {origin}"),
                "-H".into(),
                format!("Access-Control-Request-Method: {method}"),
            ];
            if !hdrs.is_empty() {
                a.extend(["-H".into(), format!("Access-Control-Request-Headers: {hdrs}")]);
            }
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            fetch(p, &srv, "/a.txt", &a)
        };
        let ok = pre("https://app.example", "PUT", "content-type,x-token");
        assert_eq!(ok.status, 204, "{ok:?}");
        assert_eq!(ok.header("access-control-allow-origin"), Some("https://app.example"));
        assert_eq!(ok.header("access-control-allow-methods"), Some("GET, PUT"));
        assert_eq!(ok.header("access-control-allow-headers"), Some("content-type, x-token"));
        assert_eq!(ok.header("access-control-max-age"), Some("600"));
        assert_eq!(ok.header("access-control-allow-credentials"), Some("true"));
        for bad in [
            pre("https://evil.example", "PUT", ""),
            pre("null", "GET", ""),
            pre("https://app.example", "DELETE", ""),
            pre("https://app.example", "PUT", "x-other"),
        ] {
            assert_eq!(bad.status, 403, "{bad:?}");
            assert!(bad.headers.iter().all(|(n, _)| !n.starts_with("access-control-allow")), "{bad:?}");
        }
        // `*`: every origin, no Vary, never credentials.
        let r = fetch(p, &srv, "/open/a.txt", &["-H", "Origin: https://anyone.example"]);
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
        assert!(r.header("access-control-allow-credentials").is_none());
        assert!(!all(&r, "vary").iter().any(|v| v == "Origin"));
    }
}

#[test]
fn static_files_are_compressed_once_and_kept_with_the_file() {
    let d = TempDir::new("compress");
    let js = "function hello(name) { return 'hello ' + name; }\n".repeat(400);
    d.write("site/app.js", &js);
    d.write("site/tiny.css", "a{}");
    d.write("site/photo.png", vec![7u8; 4000]);
    let big = "0123456789abcdef\n".repeat(200_000); // 3.4 MB, over cache_file_max
    d.write("site/big.txt", &big);
    let srv = start(
        &d,
        "[file_cache]\nsweep = \"100ms\"\n[compress]\ncache_file_max = \"1MiB\"\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n\
         [[vhost.route]]\npath = \"/raw\"\nroot = \"site\"\ncompress = false\n",
    );
    for p in BOTH {
        let br = fetch(p, &srv, "/app.js", &["-H", "Accept-Encoding: gzip, br"]);
        assert_eq!(br.header("content-encoding"), Some("br"), "{p:?} {br:?}");
        assert!(br.body.len() < js.len() / 10);
        assert_eq!(unbrotli(&br.body), js.as_bytes());
        assert!(all(&br, "vary").iter().any(|v| v.eq_ignore_ascii_case("accept-encoding")));
        assert!(br.header("accept-ranges").is_none());
        let etag = br.header("etag").unwrap().to_string();
        assert!(etag.ends_with("-br\""), "{etag}");
        let gz = fetch(p, &srv, "/app.js", &["-H", "Accept-Encoding: gzip"]);
        assert_eq!(gz.header("content-encoding"), Some("gzip"));
        assert_eq!(gunzip(&gz.body), js.as_bytes());
        // Conditionals on the compressed copy.
        let c = fetch(p, &srv, "/app.js", &["-H", "Accept-Encoding: br", "-H", &format!("If-None-Match: {etag}")]);
        assert_eq!(c.status, 304);
        // Identity: no Accept-Encoding, a range, a small body, an image, a route with compress = false.
        let id = fetch(p, &srv, "/app.js", &[]);
        assert_eq!((id.header("content-encoding"), id.body.len()), (None, js.len()));
        assert!(all(&id, "vary").iter().any(|v| v.eq_ignore_ascii_case("accept-encoding")));
        let rg = fetch(p, &srv, "/app.js", &["-H", "Accept-Encoding: br", "-H", "Range: bytes=0-7"]);
        assert_eq!((rg.status, rg.text().as_str(), rg.header("content-encoding")), (206, "function", None));
        assert_eq!(fetch(p, &srv, "/tiny.css", &["-H", "Accept-Encoding: br"]).header("content-encoding"), None);
        assert_eq!(fetch(p, &srv, "/photo.png", &["-H", "Accept-Encoding: br"]).header("content-encoding"), None);
        assert_eq!(fetch(p, &srv, "/raw/app.js", &["-H", "Accept-Encoding: br"]).header("content-encoding"), None);
        // Too large to keep: compressed as it is sent.
        let b = fetch(p, &srv, "/big.txt", &["-H", "Accept-Encoding: gzip"]);
        assert_eq!(b.header("content-encoding"), Some("gzip"));
        assert!(b.header("content-length").is_none() || p == Proto::H2);
        // (curl -i with a chunked body: decode what parse left.)
        if p == Proto::H2 {
            assert_eq!(gunzip(&b.body), big.as_bytes());
        }
    }
    // The kept copy goes with the file: a change on disk is served within a sweep.
    let js2 = "const changed = true;\n".repeat(300);
    d.write("site/app.js", &js2);
    eventually(5, "the changed file, compressed", || {
        let r = fetch(Proto::H1, &srv, "/app.js", &["-H", "Accept-Encoding: br"]);
        r.header("content-encoding") == Some("br") && unbrotli(&r.body) == js2.as_bytes()
    });
}

#[test]
fn a_streamed_proxy_response_is_compressed_as_it_comes() {
    // An upstream that sends a chunked text response in two parts, 1.5 s apart.
    let upstream = r#"
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d: break
        buf += d
    def chunk(b): c.sendall(b"%x\r\n" % len(b) + b + b"\r\n")
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk(b"part-one " * 100 + b"\n")
    time.sleep(1.5)
    chunk(b"part-two " * 100 + b"\n")
    c.sendall(b"0\r\n\r\n")
    c.close()
"#;
    let mut up = Command::new("python3").args(["-c", upstream]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(up.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let d = TempDir::new("compress-proxy");
    let srv = start(
        &d,
        &format!("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ upstream = \"http://127.0.0.1:{port}\" }}\n"),
    );
    for (p, flag) in [(Proto::H1, "--http1.1"), (Proto::H2, "--http2-prior-knowledge")] {
        let headers = d.path().join(format!("h-{p:?}"));
        let t = Instant::now();
        let mut curl = Command::new("curl")
            .args(["-sS", "-N", "--compressed", flag, "-D", headers.to_str().unwrap()])
            .arg(format!("http://{}/stream", srv.addr))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(curl.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let first_at = t.elapsed();
        let mut second = String::new();
        out.read_line(&mut second).unwrap();
        let second_at = t.elapsed();
        assert!(curl.wait().unwrap().success());
        assert!(first.starts_with("part-one") && second.starts_with("part-two"), "{first} {second}");
        // The parts are 1.5 s apart at the origin: held back, the first would come with
        // the second.
        assert!(
            second_at - first_at >= Duration::from_millis(1000),
            "first {first_at:?}, second {second_at:?}: held back"
        );
        assert!(second_at >= Duration::from_millis(1400), "{second_at:?}");
        let h = std::fs::read_to_string(&headers).unwrap().to_ascii_lowercase();
        assert!(h.contains("content-encoding: br") || h.contains("content-encoding: gzip"), "{p:?}: {h}");
        assert!(h.contains("vary: accept-encoding"), "{h}");
    }
    let _ = up.kill();
    let _ = up.wait();
}

fn chromium() -> &'static str {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium is not installed (.ci/run installs it)")
}

/// Chromium's DOM of `url` (headless, off the network, certificate errors ignored).
fn dom(profile: &std::path::Path, url: &str, shot: Option<&std::path::Path>) -> String {
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--ignore-certificate-errors".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--disable-extensions".into(),
        "--window-size=800,600".into(),
        format!("--user-data-dir={}", profile.display()),
        "--virtual-time-budget=3000".into(),
    ];
    match shot {
        Some(s) => args.push(format!("--screenshot={}", s.display())),
        None => args.push("--dump-dom".into()),
    }
    args.push(url.into());
    let out = Command::new(chromium()).args(&args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_listing_and_a_spa_deep_link_in_headless_chromium_over_h2() {
    let d = TempDir::new("chromium-features");
    d.write("files/report <2026>.txt", "numbers\n");
    d.write("files/notes/todo.md", "- test\n");
    d.write(
        "app/index.html",
        "<!DOCTYPE html><html><head><title>app</title></head><body><main id=\"view\">loading</main>\
         <script src=\"/app/app.js\"></script></body></html>\n",
    );
    d.write("app/app.js", "document.getElementById('view').textContent = 'route ' + location.pathname;\n");
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    d.write("c.pem", ck.cert.pem());
    d.write("k.pem", ck.signing_key.serialize_pem());
    let log = d.path().join("access.log");
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\ntls = {{ cert = \"c.pem\", key = \"k.pem\" }}\n\
             [log]\naccess = \"{}\"\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/files\"\nroot = \"files\"\nlisting = true\n\
             [[vhost.route]]\npath = \"/app\"\nroot = \"app\"\nfallback = \"/index.html\"\n",
            log.display()
        ),
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let base = format!("https://localhost:{}", srv.addr.port());
    let profile = d.path().join("profile");
    let listing = dom(&profile, &format!("{base}/files/"), None);
    assert!(listing.contains("Index of /files/"), "{listing}");
    assert!(listing.contains("report &lt;2026&gt;.txt"), "the name as text: {listing}");
    assert!(listing.contains("href=\"report%20%3C2026%3E.txt\""), "{listing}");
    assert!(listing.contains("href=\"notes/\""), "{listing}");
    let shot = d.path().join("listing.png");
    dom(&profile, &format!("{base}/files/"), Some(&shot));
    assert!(std::fs::metadata(&shot).map(|m| m.len() > 1000).unwrap_or(false), "no screenshot");
    let _ = std::fs::copy(&shot, std::env::temp_dir().join("selvedge-chromium-listing.png"));
    let app = dom(&profile, &format!("{base}/app/settings/profile"), None);
    assert!(app.contains("route /app/settings/profile"), "the app ran at the deep link: {app}");
    srv.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    for path in ["/files/ ", "/app/settings/profile ", "/app/app.js "] {
        let line =
            text.lines().find(|l| l.contains(&format!("\"GET {path}"))).unwrap_or_else(|| panic!("{path}: {text}"));
        assert!(line.contains("HTTP/2.0\" 200 "), "{line}");
    }
}
