//! The route-ownership invariant, as an entry point for the fuzz target
//! (`fuzz/fuzz_targets/route_ownership.rs`) and the test that replays generated inputs
//! (`tests/fuzz_corpus.rs`).
//!
//! A site with nested, protected routes over one directory tree is built once: `/` serves
//! `www`, `/admin` (auth) `www/admin`, `/admin/deep` (deny all) `www/admin/deep`, `/cgi`
//! runs CGI from `www/cgi`, `/app` FastCGI from `www/app`, `/api` and `/api/internal`
//! (auth) are proxies. Every file says which route owns it by where it lies. For each
//! input (read as a sequence of path pieces: slashes, dots and their encodings, segment
//! names in several cases, NUL, backslashes...), the request goes through the server's own
//! routing, and whatever it reaches must belong to the route that decided its checks:
//! - a file a static route serves carries that route's name;
//! - the script a CGI or FastCGI route would run lies under that route's directory and
//!   under no other route's;
//! - the path a proxy route forwards, read the way a lenient upstream reads it (decoded
//!   once more, `%2F` as `/`, `;` parameters dropped as Java servlet containers do,
//!   dot-segments resolved), is routed to that same route.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use selvedge::Request;

use crate::config::Config;
use crate::path::without_parameters;
use crate::routes::Site;

/// The pieces an input's bytes pick from, one byte each.
pub const PIECES: &[&str] = &[
    "/",
    "//",
    ".",
    "..",
    "%2e",
    "%2E",
    "%2e%2e",
    ".%2E",
    "%2f",
    "%2F",
    "%5c",
    "\\",
    "%00",
    "%61",
    "%41",
    "%25",
    "%2561",
    ";",
    ";x",
    "%3b",
    "admin",
    "Admin",
    "ADMIN",
    "dmin",
    "deep",
    "secret.txt",
    "x.txt",
    "app",
    "s.php",
    "cgi",
    "run.sh",
    "api",
    "internal",
    "a.txt",
    "link-admin",
    "sub%20dir",
    "c.txt",
    "index.html",
    "administrator",
    "%3f",
    "%23",
    "~",
    "%7e",
    "%C3%A9",
    "%ff",
    "a",
    "x",
];

/// The site the invariant is checked on, built once per process.
struct Fixture {
    site: Arc<Site>,
    root: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("selvedge-route-ownership-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let w = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("fixture dir");
            std::fs::write(p, text).expect("fixture file");
        };
        w("www/index.html", "owner=/");
        w("www/a.txt", "owner=/");
        w("www/x.txt", "owner=/");
        w("www/Admin/secret.txt", "owner=/");
        w("www/administrator/secret.txt", "owner=/");
        w("www/%61dmin/secret.txt", "owner=/");
        w("www/sub dir/c.txt", "owner=/");
        w("www/admin/secret.txt", "owner=/admin");
        w("www/admin/index.html", "owner=/admin");
        w("www/admin/x.txt", "owner=/admin");
        w("www/admin/deep/x.txt", "owner=/admin/deep");
        w("www/admin/deep/secret.txt", "owner=/admin/deep");
        w("www/app/s.php", "owner=/app");
        w("www/cgi/run.sh", "owner=/cgi");
        w("users", "u:{SHA}GpHWL3ymc5liWkNopqtdSjuqYHM=\n");
        let _ = std::os::unix::fs::symlink(root.join("www/admin"), root.join("www/link-admin"));
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(root.join("www/cgi/run.sh"), std::fs::Permissions::from_mode(0o755));
        }
        let text = "[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"www\"\nlisting = true\n\
             [[vhost.route]]\npath = \"/admin\"\nroot = \"www/admin\"\nauth = { htpasswd = \"users\" }\n\
             [[vhost.route]]\npath = \"/admin/deep\"\nroot = \"www/admin/deep\"\ndeny = [\"0.0.0.0/0\", \"::/0\"]\n\
             [[vhost.route]]\npath = \"/cgi\"\ncgi = { dir = \"www/cgi\" }\n\
             [[vhost.route]]\npath = \"/app\"\nfastcgi = { address = \"unix:/nonexistent/fpm.sock\", root = \"www/app\" }\n\
             [[vhost.route]]\npath = \"/api\"\nproxy = { upstream = \"http://127.0.0.1:9\" }\n\
             [[vhost.route]]\npath = \"/api/internal\"\nproxy = { upstream = \"http://127.0.0.1:9\" }\nauth = { htpasswd = \"users\" }\n";
        let cfg = Config::parse(&root.join("selvedge.toml"), text).expect("the fixture's config");
        let site = Arc::new(Site::build(&cfg).expect("the fixture's site"));
        Fixture { site, root: root.canonicalize().expect("the fixture's root") }
    })
}

/// The route prefixes of the fixture, and the directory each serves from (proxies: none).
const ROUTES: &[(&str, Option<&str>)] = &[
    ("/", Some("www")),
    ("/admin", Some("www/admin")),
    ("/admin/deep", Some("www/admin/deep")),
    ("/cgi", Some("www/cgi")),
    ("/app", Some("www/app")),
    ("/api", None),
    ("/api/internal", None),
];

/// The route whose prefix is the longest match of `path` (whole segments, the segments'
/// `;` parameters left out).
fn route_of(path: &[u8]) -> &'static str {
    let path = without_parameters(path);
    ROUTES
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| {
            let p = p.as_bytes();
            path.starts_with(p) && (p == b"/" || path.len() == p.len() || path[p.len()] == b'/')
        })
        .max_by_key(|p| p.len())
        .unwrap_or("none")
}

/// The route whose directory is the longest ancestor of `file` (a canonical path).
fn owner_of(root: &Path, file: &Path) -> &'static str {
    ROUTES
        .iter()
        .filter_map(|(p, dir)| Some((*p, root.join((*dir)?))))
        .filter(|(_, dir)| crate::files::gate::inside(dir, file))
        .max_by_key(|(_, dir)| dir.as_os_str().len())
        .map_or("outside", |(p, _)| p)
}

/// The path an input spells.
pub fn path_of(data: &[u8]) -> Vec<u8> {
    let mut p = b"/".to_vec();
    for &b in data.iter().take(64) {
        p.extend_from_slice(PIECES[usize::from(b) % PIECES.len()].as_bytes());
    }
    p
}

/// The invariant on one input (see the module's text). Panics when it does not hold.
pub fn route_ownership(data: &[u8]) {
    let f = fixture();
    let path = path_of(data);
    let mut req: Request =
        selvedge::http::Request::builder().uri("/").body(bytes::Bytes::new()).expect("a request").into();
    if req.set_path(&path).is_err() {
        return;
    }
    let (at, now) = f.site.respond_now_at(&mut req);
    let route = at.route.to_string();
    let shown = String::from_utf8_lossy(&path).into_owned();
    match now {
        Ok(res) => {
            let status = res.status().as_u16();
            // What a static route served: its file says whose it is.
            let body: Option<Vec<u8>> = match res.body() {
                selvedge::ResponseBody::Bytes(b) => Some(b.to_vec()),
                selvedge::ResponseBody::File(fb) => {
                    use std::os::unix::fs::FileExt;
                    let mut v = vec![0u8; fb.len as usize];
                    fb.file.read_exact_at(&mut v, fb.offset).ok().map(|()| v)
                }
                _ => None,
            };
            if let (200..=299, Some(b)) = (status, body) {
                if let Some(owner) = b.strip_prefix(b"owner=") {
                    let owner = String::from_utf8_lossy(owner).into_owned();
                    assert_eq!(owner, route, "{shown}: a file of {owner} served through {route}");
                }
            }
        }
        Err(_) => {
            let normal = req.path_bytes().to_vec();
            assert_eq!(route, route_of(&normal), "{shown}: decided by {route}");
            match route.as_str() {
                "/cgi" | "/app" => {
                    let (dir, rule_ext) = if route == "/cgi" { ("www/cgi", None) } else { ("www/app", Some(".php")) };
                    let gate = crate::files::gate::Gate::new(f.root.join(dir), false);
                    let interpreters = Default::default();
                    let rule = match rule_ext {
                        None => crate::upstream::gateway::script::Rule::Cgi { interpreters: &interpreters },
                        Some(ext) => crate::upstream::gateway::script::Rule::Fastcgi { ext, index: Some("index.php") },
                    };
                    if let Ok(s) = crate::upstream::gateway::script::locate(&gate, &route, req.path(), rule) {
                        let real = s.path.canonicalize().unwrap_or(s.path);
                        assert_eq!(owner_of(&f.root, &real), route, "{shown}: runs {}", real.display());
                    }
                }
                _ => {
                    // A lenient upstream decodes once more and drops path parameters: the
                    // path must still be this route's.
                    let decoded = without_parameters(&selvedge::percent_decode(&normal));
                    let mut again = Vec::new();
                    if selvedge::path::normalize(&decoded, &mut again).is_ok() {
                        assert_eq!(
                            route_of(&again),
                            route,
                            "{shown}: forwarded as {}",
                            String::from_utf8_lossy(&again)
                        );
                    }
                }
            }
        }
    }
}

/// The placeholder parser and expander, as an entry point for the fuzz target
/// (`fuzz/fuzz_targets/template.rs`) and `tests/fuzz_corpus.rs`. The input is a template's
/// text, then (after the first `0xFF`) bytes the request is made of: its path and query
/// (percent-encoded), a header value and a cookie. Whatever the text, parsing returns; a
/// template that parses expands within [`MAX_EXPANDED`](crate::lang::template::MAX_EXPANDED)
/// bytes in every context; in a URL, placeholders bring only visible ASCII, in a header
/// value no CR, LF or NUL, in HTML no markup, in a host only an authority's bytes, whatever
/// the request holds.
pub fn template(data: &[u8]) {
    use crate::lang::template::{Captures, Context, Subject, Template, MAX_EXPANDED};
    use regex::bytes::Regex;

    struct Fixed(Regex, Regex);
    impl Captures for Fixed {
        fn regex(&self, name: &str) -> Option<(&Regex, Subject)> {
            match name {
                "p" => Some((&self.0, Subject::Path)),
                "h" => Some((&self.1, Subject::Host)),
                _ => None,
            }
        }
    }
    static RE: OnceLock<Fixed> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Fixed(Regex::new(r"^/(?<a>[a-z]*)/(.*)$").expect("valid"), Regex::new(r"^(?<sub>[^.]+)\.").expect("valid"))
    });
    let (text, rest) = match data.iter().position(|&b| b == 0xFF) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let text = String::from_utf8_lossy(text);
    let Ok(t) = Template::parse_with(&text, re, &|_| Some("env".into())) else { return };
    let enc = |b: &[u8]| -> String {
        b.iter()
            .map(
                |&c| if c.is_ascii_alphanumeric() || c == b'/' { (c as char).to_string() } else { format!("%{c:02X}") },
            )
            .collect()
    };
    let half = rest.len() / 2;
    let value: Vec<u8> = rest.iter().copied().filter(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f)).collect();
    let uri = format!("/{}?q={}&{}", enc(&rest[..half]), enc(&rest[half..]), enc(rest));
    let Ok(http) = selvedge::http::Request::builder()
        .uri(&uri)
        .header("host", "sub.example.com:8080")
        .header("x-a", &value[..])
        .header("cookie", [&b"c="[..], &value].concat())
        .body(bytes::Bytes::new())
    else {
        return;
    };
    let req = Request::from(http);
    let graphic = text.bytes().all(|b| b.is_ascii_graphic());
    let clean = !text.contains(['\r', '\n', '\0']);
    // What escaping leaves: `&` starts its entities, so only the others are checked.
    let markup = |b: &u8| matches!(b, b'<' | b'>' | b'"' | b'\'');
    let authority = |b: &u8| b.is_ascii_alphanumeric() || b"-._~:[]%".contains(b);
    for cx in [Context::Url, Context::Header, Context::Body, Context::Html, Context::Host] {
        let out = t.render(&req, cx, Some("id"));
        assert!(out.len() <= MAX_EXPANDED);
        if cx == Context::Html && !text.bytes().any(|b| markup(&b)) {
            assert!(!out.iter().any(markup), "{text:?} gave {out:?}");
        }
        if cx == Context::Host && text.bytes().all(|b| authority(&b)) {
            assert!(out.iter().all(authority), "{text:?} gave {out:?}");
        }
        if cx == Context::Url && graphic {
            assert!(out.iter().all(u8::is_ascii_graphic), "{text:?} gave {out:?}");
        }
        if cx == Context::Header && clean {
            assert!(!out.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)), "{text:?} gave {out:?}");
        }
    }
}

/// The HTTP cache's rules (`cache::control`), as an entry point for the fuzz target
/// (`fuzz/fuzz_targets/cache_control.rs`) and `tests/fuzz_corpus.rs`. The input is split
/// at `0xFF` bytes into a response's `Cache-Control`, a request's, a `Vary` and a request's
/// `Accept-Encoding`; the last byte picks the times. Whatever the bytes: parsing returns,
/// every duration is at most 2^31 seconds, `no-store` and `private` are never stored, a
/// fresh answer's ttl is within its lifetime, `Vary`'s names come out lower case, sorted,
/// once each, and `Accept-Encoding` normalizes the same whatever the order of its items.
pub fn cache_control(data: &[u8]) {
    fn as_refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
        v.iter().map(Vec::as_slice).collect()
    }
    use crate::cache::control::{self, Answered, Asked, RequestDirectives, ResponseDirectives, Stored, MAX_DELTA};
    let mut parts = data.split(|&b| b == 0xFF);
    let (res, req, vary, ae) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let lines = |b: &[u8]| -> Vec<Vec<u8>> { b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect() };
    let (res_l, req_l, vary_l) = (lines(res), lines(req), lines(vary));
    let cc = ResponseDirectives::parse(&as_refs(&res_l));
    let rq = RequestDirectives::parse(&as_refs(&req_l), &[b"no-cache"]);
    for v in
        [cc.max_age, cc.s_maxage, cc.stale_while_revalidate, cc.stale_if_error, rq.max_age, rq.max_stale, rq.min_fresh]
            .into_iter()
            .flatten()
    {
        assert!(v <= MAX_DELTA);
    }
    let t = u64::from(data.last().copied().unwrap_or(0));
    let s = Stored {
        cc,
        date: Some(1_000_000 + t),
        expires: (t % 3 == 0).then_some(1_000_000 + t * 7),
        last_modified: (t % 2 == 0).then_some(900_000),
        age: (t % 5 == 0).then_some(t),
        request_time: 1_000_000,
        response_time: 1_000_000 + t % 7,
    };
    let asked = Asked { authorization: t % 4 == 0, no_store: rq.no_store };
    let answered = Answered { status: [200, 206, 304, 404, 500][t as usize % 5], set_cookie: false, vary_any: false };
    if let Ok(lifetime) = control::storable(asked, answered, &s, 0.1) {
        assert!(!cc.no_store && !cc.private && !rq.no_store);
        assert!(lifetime <= MAX_DELTA);
        let now = 1_000_000 + t * 3;
        assert!(control::current_age(&s, now) <= MAX_DELTA);
        if let control::Use::Fresh { ttl } = control::usable(&s, lifetime, &rq, now) {
            assert!(ttl <= lifetime);
        }
    }
    if let Ok(names) = control::vary_names(&as_refs(&vary_l)) {
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        assert!(names.iter().all(|n| !n.bytes().any(|b| b.is_ascii_uppercase())));
    }
    let mut a = Vec::new();
    control::vary_value("accept-encoding", &[ae], &mut a);
    let mut items: Vec<&[u8]> = ae.split(|&b| b == b',').collect();
    items.reverse();
    let reversed = items.join(&b","[..]);
    let mut b = Vec::new();
    control::vary_value("accept-encoding", &[&reversed], &mut b);
    assert_eq!(a, b, "the order of Accept-Encoding's items does not matter");
}
