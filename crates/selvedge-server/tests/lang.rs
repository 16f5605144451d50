//! Matchers, placeholders, `respond`, `try_files` and redirect rules with `match`, against
//! the real binary on 127.0.0.1 (HTTP/1.1 on raw sockets, HTTP/2 with curl).

mod common;

use std::process::Command;

use common::{request, Resp, Srv, TempDir};

const HEAD: &str = "[server]\nworkers = 1\n[[listen]]\nport = 0\n";

fn start(d: &TempDir, body: &str) -> Srv {
    let cfg = d.write("lang.toml", format!("{HEAD}{body}"));
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

/// A matcher `name` and two routes at `/t/NAME`: with `match`, answering `yes`, and
/// without, answering `no`.
fn yes_no(name: &str, matcher: &str) -> String {
    format!(
        "[vhost.matchers.{name}]\n{matcher}\n\
         [[vhost.route]]\npath = \"/t/{name}\"\nmatch = \"{name}\"\nrespond = {{ body = \"yes\" }}\n\
         [[vhost.route]]\npath = \"/t/{name}\"\nrespond = {{ body = \"no\" }}\n"
    )
}

fn send(s: &Srv, method: &str, target: &str, fields: &[(&str, &str)]) -> Resp {
    let mut raw = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    if !fields.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        raw.push_str("Host: t\r\n");
    }
    for (n, v) in fields {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    request(s.addr, &raw)
}

fn says(s: &Srv, method: &str, target: &str, fields: &[(&str, &str)]) -> String {
    let r = send(s, method, target, fields);
    assert_eq!(r.status, 200, "{method} {target} {fields:?}: {}", r.text());
    r.text()
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").args(["-sS", "--max-time", "10"]).args(args).output().expect("curl");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every condition, alone: it admits what it names and nothing else.
#[test]
fn every_condition_holds_for_what_it_names_only() {
    let d = TempDir::new("lang-cond");
    let mut cfg = String::from("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[[listen]]\nport = 0\n[[vhost]]\n");
    for (name, m) in [
        ("method", "method = [\"POST\", \"PUT\"]"),
        ("exact", "path = \"/t/exact/here\""),
        ("glob", "path = [\"/t/glob/*/x\", \"*.php\"]"),
        ("prefix", "path_prefix = \"/t/prefix/in\""),
        ("regex", "path_regex = \"^/t/regex/v[0-9]+$\""),
        ("host", "host = [\"example.com\", \"*.example.org\"]"),
        ("host_regex", "host_regex = \"^api[0-9]\\\\.\""),
        ("present", "header = { \"X-Beta\" = \"*\" }"),
        ("exact_header", "header = { \"X-Env\" = [\"staging\", \"prod*\"] }"),
        ("header_regex", "header_regex = { \"User-Agent\" = \"(?i)bot\" }"),
        ("query", "query = { debug = \"1\", lang = \"*\" }"),
        ("cookie", "cookie = { ab = \"b\" }"),
        ("remote", "remote_ip = \"127.0.0.0/8\""),
        ("far", "remote_ip = [\"10.0.0.0/8\", \"::2\"]"),
        ("client", "client_ip = \"10.1.0.0/16\""),
        ("h2", "protocol = \"h2\""),
        ("h11", "protocol = \"http/1.1\""),
        ("tls", "protocol = \"https\""),
        ("not", "method = \"GET\"\nnot = { header = { \"X-Admin\" = \"*\" } }"),
        ("both", "method = \"GET\"\nquery = { a = \"1\" }"),
    ] {
        cfg.push_str(&yes_no(name, m));
    }
    // Any of a list: a route naming two matchers.
    cfg.push_str(
        "[[vhost.route]]\npath = \"/t/any\"\nmatch = [\"present\", \"cookie\"]\nrespond = { body = \"yes\" }\n\
         [[vhost.route]]\npath = \"/t/any\"\nrespond = { body = \"no\" }\n\
         [[vhost.route]]\npath = \"/t/inline\"\nmatch = { method = \"DELETE\" }\nrespond = { body = \"yes\" }\n\
         [[vhost.route]]\npath = \"/t/inline\"\nrespond = { body = \"no\" }\n",
    );
    let cfg = d.write("c.toml", cfg);
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let get = |t: &str, f: &[(&str, &str)]| says(&s, "GET", t, f);
    assert_eq!(says(&s, "POST", "/t/method", &[("content-length", "0")]), "yes");
    assert_eq!(says(&s, "PUT", "/t/method", &[("content-length", "0")]), "yes");
    assert_eq!(get("/t/method", &[]), "no");
    assert_eq!(get("/t/exact/here", &[]), "yes");
    assert_eq!(get("/t/exact/here/", &[]), "no");
    assert_eq!(get("/t/exact//here", &[]), "yes", "the normalized path");
    assert_eq!(get("/t/exact/%68ere", &[]), "yes", "the normalized path");
    assert_eq!(get("/t/exact/there/../here", &[]), "yes", "the normalized path");
    assert_eq!(get("/t/glob/a/b/x", &[]), "yes");
    assert_eq!(get("/t/glob/x", &[]), "no");
    assert_eq!(get("/t/glob/index.php", &[]), "yes");
    assert_eq!(get("/t/glob/index.phps", &[]), "no");
    assert_eq!(get("/t/glob/index.php;jsessionid=1", &[]), "yes", "parameters left out, as routes do");
    assert_eq!(get("/t/prefix/in", &[]), "yes");
    assert_eq!(get("/t/prefix/in/deep", &[]), "yes");
    assert_eq!(get("/t/prefix/inside", &[]), "no", "whole segments");
    assert_eq!(get("/t/regex/v12", &[]), "yes");
    assert_eq!(get("/t/regex/v1x", &[]), "no");
    assert_eq!(get("/t/host", &[("Host", "EXAMPLE.com.:8080")]), "yes", "case, port and trailing dot");
    assert_eq!(get("/t/host", &[("Host", "a.example.org")]), "yes");
    assert_eq!(get("/t/host", &[("Host", "a.b.example.org")]), "no", "one label");
    assert_eq!(get("/t/host", &[("Host", "example.org")]), "no");
    assert_eq!(get("/t/host_regex", &[("Host", "api7.x")]), "yes");
    assert_eq!(get("/t/host_regex", &[("Host", "www.api7.x")]), "no");
    assert_eq!(get("/t/present", &[("x-beta", "")]), "yes");
    assert_eq!(get("/t/present", &[]), "no");
    assert_eq!(get("/t/exact_header", &[("X-Env", "staging")]), "yes");
    assert_eq!(get("/t/exact_header", &[("X-Env", "production")]), "yes");
    assert_eq!(get("/t/exact_header", &[("X-Env", "Staging")]), "no", "values compare as written");
    assert_eq!(get("/t/exact_header", &[("X-Env", "dev"), ("X-Env", "staging")]), "yes", "any field of the name");
    assert_eq!(get("/t/header_regex", &[("User-Agent", "GoogleBOT/2")]), "yes");
    assert_eq!(get("/t/header_regex", &[("User-Agent", "curl")]), "no");
    assert_eq!(get("/t/query?lang=&debug=%31", &[]), "yes", "decoded values");
    assert_eq!(get("/t/query?debug=1", &[]), "no", "all keys");
    assert_eq!(get("/t/query?debug=2&lang=x", &[]), "no");
    assert_eq!(get("/t/cookie", &[("Cookie", "x=1; ab=b")]), "yes");
    assert_eq!(get("/t/cookie", &[("Cookie", "ab=a"), ("Cookie", "zz=b")]), "no");
    // Any cookie of the name, read as leniently as applications read cookies.
    for c in ["ab =b", "ab= b", "ab=a; ab=b", "x=1, ab=b", "ab=%62", "ab=\"b\""] {
        assert_eq!(get("/t/cookie", &[("Cookie", c)]), "yes", "{c}");
    }
    // Any value of a query key (applications differ on which one they read).
    assert_eq!(get("/t/query?debug=2&debug=1&lang=x", &[]), "yes");
    assert_eq!(get("/t/query?+debug=1&lang=x", &[]), "yes");
    assert_eq!(get("/t/remote", &[]), "yes");
    assert_eq!(get("/t/far", &[]), "no");
    assert_eq!(get("/t/far", &[("X-Forwarded-For", "10.0.0.1")]), "no", "remote_ip is the peer");
    assert_eq!(get("/t/client", &[("X-Forwarded-For", "10.1.2.3")]), "yes", "after trusted_proxies");
    assert_eq!(get("/t/client", &[("X-Forwarded-For", "10.1.2.3, 10.2.0.1")]), "no", "the rightmost untrusted");
    assert_eq!(get("/t/client", &[]), "no");
    assert_eq!(get("/t/h11", &[]), "yes");
    assert_eq!(get("/t/h2", &[]), "no");
    assert_eq!(get("/t/tls", &[]), "no");
    let url = |p: &str| format!("http://{}{p}", s.addr);
    assert_eq!(curl(&["--http2-prior-knowledge", &url("/t/h2")]), "yes");
    assert_eq!(curl(&["--http2-prior-knowledge", &url("/t/h11")]), "no");
    assert_eq!(curl(&["--http2-prior-knowledge", "-H", "x-beta: 1", &url("/t/present")]), "yes");
    assert_eq!(get("/t/not", &[]), "yes");
    assert_eq!(get("/t/not", &[("X-Admin", "1")]), "no");
    assert_eq!(says(&s, "HEAD", "/t/not", &[]), "");
    assert_eq!(get("/t/both?a=1", &[]), "yes");
    assert_eq!(get("/t/both?a=2", &[]), "no");
    assert_eq!(get("/t/any", &[("X-Beta", "1")]), "yes");
    assert_eq!(get("/t/any", &[("Cookie", "ab=b")]), "yes");
    assert_eq!(get("/t/any", &[]), "no");
    assert_eq!(says(&s, "DELETE", "/t/inline", &[]), "yes");
    assert_eq!(get("/t/inline", &[]), "no");
    // Methods in any case: applications that upper-case them read `delete` as DELETE.
    assert_eq!(says(&s, "delete", "/t/inline", &[]), "yes");
    assert_eq!(says(&s, "Put", "/t/method", &[("content-length", "0")]), "yes");
}

/// Routes of one prefix: those with `match` first, in the file's order; a longer prefix
/// wins over a shorter one whatever its matchers.
#[test]
fn precedence_is_longest_prefix_then_file_order() {
    let d = TempDir::new("lang-order");
    let s = start(
        &d,
        "[[vhost]]\n\
         [vhost.matchers.get]\nmethod = \"GET\"\n\
         [vhost.matchers.beta]\nheader = { \"X-Beta\" = \"*\" }\n\
         [[vhost.route]]\npath = \"/\"\nrespond = { body = \"plain /\" }\n\
         [[vhost.route]]\npath = \"/\"\nmatch = \"get\"\nrespond = { body = \"get /\" }\n\
         [[vhost.route]]\npath = \"/\"\nmatch = \"beta\"\nrespond = { body = \"beta /\" }\n\
         [[vhost.route]]\npath = \"/a\"\nrespond = { body = \"plain /a\" }\n",
    );
    assert_eq!(says(&s, "GET", "/x", &[]), "get /");
    assert_eq!(says(&s, "GET", "/x", &[("X-Beta", "1")]), "get /", "file order among matched routes");
    assert_eq!(says(&s, "POST", "/x", &[("X-Beta", "1"), ("content-length", "0")]), "beta /");
    assert_eq!(says(&s, "POST", "/x", &[("content-length", "0")]), "plain /");
    assert_eq!(says(&s, "GET", "/a/b", &[]), "plain /a", "the longer prefix");
}

/// Every placeholder in a `respond` body and header, through a real request.
#[test]
fn placeholders_read_the_request() {
    let d = TempDir::new("lang-ph");
    let cfg = d.write(
        "c.toml",
        format!(
            "{HEAD}[[vhost]]\n\
             [vhost.matchers.ver]\npath_regex = \"^/p/v(?<num>[0-9]+)/(.*)$\"\n\
             [[vhost.route]]\npath = \"/p\"\n\
             respond = {{ status = 203, body = \"\"\"\
             host={{host}}|hp={{hostport}}|path={{path}}|query={{query}}|uri={{uri}}|method={{method}}|\
             scheme={{scheme}}|ip={{remote_ip}}|client={{client_ip}}|h={{header.x-a}}|q={{query.q}}|\
             c={{cookie.sid}}|env={{env.LANG_TEST_STAGE}}|re={{re.ver.num}},{{re.ver.2}}|tls={{tls.version}}|\
             {{\"json\": true}}|{{{{x}}\"\"\", headers = {{ \"X-Id\" = \"{{request_id}}\", \"X-Unix\" = \"{{time.unix}}\", \
             \"X-Time\" = \"{{time.rfc3339}}\", \"X-Port\" = \"{{remote_port}}\", \"Content-Type\" = \"text/plain; x=test\" }} }}\n"
        ),
    );
    let mut cmd = Command::new(common::bin());
    common::clean_env(&mut cmd);
    cmd.env("LANG_TEST_STAGE", "staging").args(["--config", cfg.to_str().unwrap()]);
    let s = Srv::spawn(cmd);
    let r = send(
        &s,
        "GET",
        "/p/v42/a%20b/./c?q=%41+b&z",
        &[("Host", "WWW.Example.com:8080"), ("X-A", "1"), ("x-a", "2"), ("Cookie", "a=1; sid=\"s1\"")],
    );
    assert_eq!(r.status, 203);
    assert_eq!(r.header("content-type"), Some("text/plain; x=test"));
    assert_eq!(
        r.text(),
        "host=www.example.com|hp=WWW.Example.com:8080|path=/p/v42/a%20b/c|query=q=%41+b&z|uri=/p/v42/a%20b/c?q=%41+b&z|\
         method=GET|scheme=http|ip=127.0.0.1|client=127.0.0.1|h=1, 2|q=A b|c=s1|env=staging|re=42,a%20b/c|tls=|\
         {\"json\": true}|{x}"
    );
    let id = r.header("x-id").unwrap();
    assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let unix: u64 = r.header("x-unix").unwrap().parse().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(unix.abs_diff(now) < 60, "{unix} vs {now}");
    let t = r.header("x-time").unwrap();
    assert!(t.len() == 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    assert!(r.header("x-port").unwrap().parse::<u16>().is_ok());
    // A value a client sends cannot break the field it lands in.
    let r = send(&s, "GET", "/p/v1/x?q=%0D%0Aset-cookie:%20a", &[]);
    assert!(r.text().contains("q=\r\nset-cookie: a|"), "a body takes the bytes as they are: {}", r.text());
    assert!(r.header("set-cookie").is_none());
}

/// Redirect rules with `match` and placeholders: a canonical host, a rewrite by cookie.
#[test]
fn redirects_and_rewrites_with_matchers() {
    let d = TempDir::new("lang-redir");
    let s = start(
        &d,
        "[[vhost]]\n\
         [vhost.matchers.bare]\nhost = \"example.com\"\n\
         [vhost.matchers.b]\ncookie = { ab = \"b\" }\n\
         [vhost.matchers.old]\npath_regex = \"^/old/(?<rest>.*)$\"\n\
         [[vhost.redirect]]\nmatch = \"bare\"\nto = \"https://www.example.com{uri}\"\nstatus = 301\n\
         [[vhost.redirect]]\nmatch = \"b\"\nfrom = \"^/home$\"\nto = \"/b{path}\"\nrewrite = true\n\
         [[vhost.redirect]]\nmatch = \"old\"\nto = \"/new/{re.old.rest}?from={header.x-from}\"\nstatus = 308\n\
         [[vhost.route]]\npath = \"/\"\nrespond = { body = \"a {uri}\" }\n\
         [[vhost.route]]\npath = \"/b\"\nrespond = { body = \"b {uri}\" }\n",
    );
    let r = send(&s, "GET", "/x/y?z=1", &[("Host", "example.com")]);
    assert_eq!((r.status, r.header("location")), (301, Some("https://www.example.com/x/y?z=1")));
    assert_eq!(says(&s, "GET", "/home?k", &[("Host", "www.example.com")]), "a /home?k");
    assert_eq!(says(&s, "GET", "/home?k", &[("Cookie", "ab=b")]), "b /b/home?k");
    assert_eq!(says(&s, "GET", "/homer", &[("Cookie", "ab=b")]), "a /homer", "from and match: both must hold");
    let r = send(&s, "GET", "/old/a/b", &[("X-From", "x y")]);
    assert_eq!((r.status, r.header("location")), (308, Some("/new/a/b?from=x%20y")), "placeholders percent-encoded");
    // A client's value is one component of the URL: it adds no `/`, `?`, `#` or `@`.
    let r = send(&s, "GET", "/old/a", &[("X-From", "evil.com/#@x?y")]);
    assert_eq!(r.header("location"), Some("/new/a?from=evil.com%2F%23%40x%3Fy"));
}

/// A redirect rule's matchers read the path as routes do, without `;` parameters.
#[test]
fn redirect_matchers_ignore_parameters() {
    let d = TempDir::new("lang-redir-params");
    let s = start(
        &d,
        "[[vhost]]\n\
         [[vhost.redirect]]\nmatch = { path_prefix = \"/admin\", not = { client_ip = \"10.0.0.0/8\" } }\n\
         to = \"https://login.example.com/\"\n\
         [[vhost.route]]\npath = \"/\"\nrespond = { body = \"in\" }\n",
    );
    for p in ["/admin/x", "/admin;x/x", "/admin;x", "/admin%3B/x", "//admin/x", "/%61dmin", "/;x/admin/y"] {
        assert_eq!(send(&s, "GET", p, &[]).status, 302, "{p}");
    }
    assert_eq!(says(&s, "GET", "/administrator", &[]), "in");
    // `from` reads the same path: a rule on `^/admin` holds for `/;x/admin`.
    let s = start(
        &d,
        "[[vhost]]\n[[vhost.redirect]]\nfrom = \"^/admin\"\nto = \"/denied\"\nrewrite = true\n\
         [[vhost.route]]\npath = \"/\"\nrespond = { body = \"{path}\" }\n",
    );
    for p in ["/admin/y", "/;x/admin/y", "/admin;x/y", "/%61dmin"] {
        assert_eq!(says(&s, "GET", p, &[]), "/denied", "{p}");
    }
}

/// `try_files` runs after the route's checks: a request they refuse learns nothing about
/// which files exist.
#[test]
fn try_files_after_the_checks() {
    let d = TempDir::new("lang-try-checks");
    d.write("www/index.html", "spa");
    let s = start(
        &d,
        &format!(
            "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\nallow = [\"10.0.0.0/8\"]\n\
             try_files = [\"{{path}}\", \"=404\"]\n",
            d.path().join("www").display()
        ),
    );
    assert_eq!(send(&s, "GET", "/index.html", &[]).status, 403);
    assert_eq!(send(&s, "GET", "/nope.html", &[]).status, 403);
    // The path a fallback makes meets the redirect rules, as a path asked for does.
    let s = start(
        &d,
        &format!(
            "[[vhost]]\n[[vhost.redirect]]\nfrom = \"^/admin\"\nto = \"/denied\"\nrewrite = true\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"{}\"\ntry_files = [\"{{path}}\", \"/{{query.a}}/{{query.b}}\"]\n\
             [[vhost.route]]\npath = \"/admin\"\nrespond = {{ body = \"ADMIN\" }}\n\
             [[vhost.route]]\npath = \"/denied\"\nrespond = {{ body = \"denied\" }}\n",
            d.path().join("www").display()
        ),
    );
    assert_eq!(says(&s, "GET", "/nothing?a=admin&b=x", &[]), "denied");
}

/// A `respond` body escapes what placeholders bring unless it goes out as plain text,
/// whichever table sets its type.
#[test]
fn respond_bodies_escape_unless_plain() {
    let d = TempDir::new("lang-xss");
    let s = start(
        &d,
        "[[vhost]]\n\
         [[vhost.route]]\npath = \"/plain\"\nrespond = { body = \"Hello {query.n}\" }\n\
         [[vhost.route]]\npath = \"/html\"\nrespond = { body = \"Hello {query.n}\" }\n\
         headers = { \"Content-Type\" = \"text/html; charset=utf-8\" }\n\
         [[vhost.route]]\npath = \"/typed\"\nrespond = { body = \"Hello {query.n}\", headers = { \"Content-Type\" = \"{query.t}\" } }\n",
    );
    let q = "?n=%3Cscript%3Ex%3C/script%3E&t=text/html";
    assert_eq!(says(&s, "GET", &format!("/plain{q}"), &[]), "Hello <script>x</script>");
    for p in ["/html", "/typed"] {
        assert_eq!(says(&s, "GET", &format!("{p}{q}"), &[]), "Hello &#60;script&#62;x&#60;/script&#62;", "{p}");
    }
}

/// `try_files`: a file, a directory, else the last entry (another route, or a status);
/// what the route would not serve (dotfiles, a symlink out of the root) is not a file.
#[test]
fn try_files_picks_the_first_that_exists() {
    let d = TempDir::new("lang-try");
    d.write("www/a.txt", "file a");
    d.write("www/dir/index.html", "dir index");
    d.write("www/index.html", "spa");
    d.write("www/.secret", "secret");
    d.write("outside.txt", "outside");
    std::os::unix::fs::symlink(d.path().join("outside.txt"), d.path().join("www/link.txt")).unwrap();
    let www = d.path().join("www");
    let s = start(
        &d,
        &format!(
            "[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"{w}\"\ntry_files = [\"{{path}}\", \"{{path}}/\", \"/index.html\"]\n\
             [[vhost.route]]\npath = \"/php\"\nroot = \"{w}\"\ntry_files = [\"{{path}}\", \"/app?route={{path}}&{{query}}\"]\n\
             [[vhost.route]]\npath = \"/strict\"\nroot = \"{w}\"\ntry_files = [\"{{path}}\", \"=404\"]\n\
             [[vhost.route]]\npath = \"/app\"\nrespond = {{ body = \"app {{uri}}\" }}\n",
            w = www.display()
        ),
    );
    assert_eq!(says(&s, "GET", "/a.txt", &[]), "file a");
    assert_eq!(says(&s, "GET", "/dir", &[]), "dir index");
    assert_eq!(says(&s, "GET", "/deep/link/route", &[]), "spa");
    assert_eq!(says(&s, "GET", "/.secret", &[]), "spa", "a dotfile is not served, so not tried");
    assert_eq!(says(&s, "GET", "/link.txt", &[]), "spa", "a symlink out of the root is not served");
    assert_eq!(says(&s, "GET", "/php/x?y=1", &[]), "app /app?route=/php/x&y=1");
    assert_eq!(send(&s, "GET", "/strict/none", &[]).status, 404);
}

/// `respond` answers, with a status alone or with fields; the route's checks apply.
#[test]
fn respond_routes() {
    let d = TempDir::new("lang-respond");
    let s = start(
        &d,
        "[[vhost]]\n\
         [[vhost.route]]\npath = \"/healthz\"\nrespond = 204\n\
         [[vhost.route]]\npath = \"/\"\nrespond = { status = 503, body = \"down for maintenance\\n\", headers = { \"Retry-After\" = \"120\" } }\n\
         [[vhost.route]]\npath = \"/internal\"\ndeny = [\"127.0.0.0/8\"]\nrespond = { body = \"no\" }\n",
    );
    let r = s.get("/healthz");
    assert_eq!((r.status, r.body.len()), (204, 0));
    let r = s.get("/anything");
    assert_eq!((r.status, r.header("retry-after")), (503, Some("120")));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.text(), "down for maintenance\n");
    assert_eq!(s.get("/internal").status, 403);
}

/// What a configuration gets wrong is refused with its position.
#[test]
fn mistakes_are_refused_at_load() {
    let d = TempDir::new("lang-bad");
    for (body, want) in [
        ("[[vhost.route]]\npath = \"/\"\nrespond = { body = \"{nope}\" }\n", "placeholder {nope}"),
        ("[[vhost.route]]\npath = \"/\"\nmatch = \"ghost\"\nrespond = 200\n", "no matcher \"ghost\""),
        ("[vhost.matchers.m]\nmethod = \"get\"\n[[vhost.route]]\npath = \"/\"\nrespond = 200\n", "upper case"),
        ("[vhost.matchers.m]\n[[vhost.route]]\npath = \"/\"\nrespond = 200\n", "at least one condition"),
        ("[vhost.matchers.m]\npath_regex = \"(\"\n[[vhost.route]]\npath = \"/\"\nrespond = 200\n", "path_regex"),
        ("[vhost.matchers.m]\nmethod = \"GET\"\n[[vhost.route]]\npath = \"/\"\nrespond = { body = \"{re.m.1}\" }\n", "with a path_regex"),
        ("[[vhost.route]]\npath = \"/\"\nrespond = \"ok\"\n", "respond: a status"),
        ("[vhost.matchers.m]\nhost_regex = \"^a\"\n[[vhost.route]]\npath = \"/\"\nrespond = { body = \"{re.m.1}\" }\n", "no group 1"),
        ("[[vhost.route]]\npath = \"/\"\nrespond = 101\n", "200 to 599"),
        ("[[vhost.route]]\npath = \"/\"\nrespond = { status = 204, body = \"x\" }\n", "no body"),
        ("[[vhost.redirect]]\nto = \"/x\"\n[[vhost.route]]\npath = \"/\"\nrespond = 200\n", "`from`"),
        ("[[vhost.route]]\npath = \"/\"\nproxy = { upstream = \"http://127.0.0.1:9\", header_up = { \"Content-Length\" = \"1\" } }\n", "frames the message"),
        ("[[vhost.route]]\npath = \"/\"\nproxy = { upstream = \"http://127.0.0.1:9\", header_up = { \"X-A\" = \"{tls.nope}\" } }\n", "placeholder {tls.nope}"),
        ("[[vhost.route]]\npath = \"/\"\nproxy = { upstream = \"http://127.0.0.1:9\", header_down = { \"Host\" = \"x\" } }\n", "Host"),
        ("[[vhost.route]]\npath = \"/\"\nrespond = 200\ntry_files = [\"{path}\"]\n", "static routes"),
    ] {
        let cfg = d.write("bad.toml", format!("{HEAD}[[vhost]]\n{body}"));
        let out = Command::new(common::bin()).args(["check", "-c", cfg.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{body} was accepted");
        assert!(err.contains(want), "{body}: {err}");
        assert!(err.contains("bad.toml:"), "a position: {err}");
    }
}

/// Placeholders in the access log's template, escaped as the log escapes.
#[test]
fn log_formats_take_placeholders() {
    let d = TempDir::new("lang-log");
    let log = d.path().join("access.log");
    let cfg = d.write(
        "c.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[log]\naccess = \"{}\"\n\
             format = \"$status tenant=\\\"{{header.x-tenant}}\\\" q={{query.q}} c={{cookie.s}} $request_method\"\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = 204\n",
            log.display()
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    send(&s, "GET", "/x?q=a%22b%0A", &[("X-Tenant", "ac\"me"), ("Cookie", "s=42")]);
    common::eventually(5, "the log line", || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("tenant=")));
    let line = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        line, "204 tenant=\"ac\\\"me\" q=a\\\"b%0A c=42 GET\n",
        "the template's quotes as written, a request's escaped, a newline encoded: {line:?}"
    );
}

/// A host name longer than any DNS name still finds its wildcard host (not the default
/// one, past the wildcard host's checks).
#[test]
fn long_hosts_find_their_wildcard() {
    let d = TempDir::new("lang-long-host");
    let s = start(
        &d,
        "[[vhost]]\nhosts = [\"*.admin.test\"]\n[[vhost.route]]\npath = \"/\"\nrespond = { body = \"admin\" }\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = { body = \"default\" }\n",
    );
    for n in [10, 245, 246, 300] {
        let host = format!("{}.admin.test", "a".repeat(n));
        assert_eq!(says(&s, "GET", "/", &[("Host", &host)]), "admin", "{n}");
    }
}

/// `{tls.sni}` and `{tls.version}` on a TLS listener, over HTTP/1.1 and HTTP/2 (curl,
/// naming the server as `--resolve` says).
#[test]
fn tls_placeholders() {
    let d = TempDir::new("lang-tls");
    let (pki, issuer) = common::pki::Pki::ca(&d, "lang");
    let leaf = common::pki::leaf(&d, &issuer, "site", &["a.test", "b.test"], false);
    let cfg = d.write(
        "c.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\ntls = {{ cert = \"{}\", key = \"{}\" }}\n[[vhost]]\n\
             [[vhost.route]]\npath = \"/\"\nrespond = {{ body = \"{{tls.sni}} {{tls.version}} {{scheme}}\" }}\n",
            leaf.cert, leaf.key
        ),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let port = s.addr.port();
    for (name, proto) in [("a.test", "--http1.1"), ("b.test", "--http2")] {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", proto, "--cacert", pki.ca.to_str().unwrap()])
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1"), &format!("https://{name}:{port}/")])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{name} tls1.3 https"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // No SNI (a client naming an address sends none): empty.
    assert!(curl(&["--cacert", pki.ca.to_str().unwrap(), &format!("https://127.0.0.1:{port}/"), "-k"])
        .starts_with(" tls1.3 https"));
}
