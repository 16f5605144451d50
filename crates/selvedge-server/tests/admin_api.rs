//! The configuration API on the admin listener, with the binary run as a process: every
//! command of docs/admin-api.md, checks that change nothing when they fail, versions,
//! access rules, persistence and SIGHUP, the command line, and changes under load.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{admin_addr, eventually, free_port, request, Resp, Srv, TempDir, BIN};

const DOC: &str = include_str!("../../../docs/admin-api.md");

fn site(d: &TempDir) {
    d.write("site/index.html", "home\n");
}

fn start(d: &TempDir, text: &str) -> (Srv, SocketAddr) {
    let f = d.write("selvedge.toml", text);
    let srv = Srv::start(&["run", "-c", f.to_str().unwrap()]);
    let admin = admin_addr(&srv);
    (srv, admin)
}

fn plain(admin: &str, extra: &str) -> String {
    format!(
        "[server]\nworkers = 1\npid_file = \"selvedge.pid\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n[admin]\nlisten = \
         \"{admin}\"\napi = true\n{extra}\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
    )
}

/// One request to the admin listener: `METHOD PATH` with `headers` and a JSON `body`.
fn call(admin: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Resp {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        raw.push_str("Host: localhost\r\n");
    }
    for (n, v) in headers {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type")) {
            raw.push_str("Content-Type: application/json\r\n");
        }
        raw.push_str(&format!("Content-Length: {}\r\n\r\n{b}", b.len()));
    } else {
        raw.push_str("\r\n");
    }
    request(admin, &raw)
}

fn json(r: &Resp) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

fn get(addr: SocketAddr, path: &str) -> u16 {
    request(addr, &format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")).status
}

#[test]
fn every_command_of_the_documentation_runs() {
    let d = TempDir::new("api-doc");
    site(&d);
    let (_, rest) = DOC.split_once("## A session").unwrap();
    let toml = rest.split("```toml\n").nth(1).unwrap().split("```").next().unwrap();
    let quoted =
        |t: &str| t.replace("\"127.0.0.1:8080\"", "\"127.0.0.1:0\"").replace("\"127.0.0.1:2019\"", "\"127.0.0.1:0\"");
    let (mut srv, admin) = start(&d, &quoted(toml));
    let mut ran = 0;
    for block in rest.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap();
        let mut lines = block.lines().peekable();
        while let Some(cmd) = lines.next() {
            if !cmd.starts_with("curl ") {
                continue;
            }
            let want =
                lines.next().and_then(|l| l.strip_prefix("# → ")).unwrap_or_else(|| panic!("no status for {cmd}"));
            let cmd = quoted(cmd)
                .replace("http://127.0.0.1:8080", &format!("http://{}", srv.addr))
                .replace("http://127.0.0.1:2019", &format!("http://{admin}"));
            let out =
                Command::new("bash").arg("-c").arg(format!("{cmd} -o /dev/null -w '%{{http_code}}'")).output().unwrap();
            let got = String::from_utf8_lossy(&out.stdout);
            assert_eq!(got.trim(), want, "{cmd}");
            ran += 1;
        }
    }
    assert!(ran >= 20, "{ran} commands");
    // The last one stopped the server.
    assert_eq!(srv.wait_exit(10), Some(0));
    // The error shown on the page is the one the server gives.
    let (_srv, admin) = start(&d, &quoted(toml));
    let shown = rest.split("```json\n").nth(1).unwrap().split("```").next().unwrap();
    let shown: serde_json::Value = serde_json::from_str(shown).unwrap();
    call(
        admin,
        "POST",
        "/config/vhost/0/route",
        &[],
        Some(r#"{"path": "/health", "respond": {"status": 200, "body": "ok"}}"#),
    );
    let r = call(admin, "PUT", "/config/vhost/0/route/1/max_age", &[], Some("\"soon\""));
    assert_eq!(json(&r), shown, "the page's example error");
}

#[test]
fn a_change_that_fails_its_checks_changes_nothing() {
    let d = TempDir::new("api-bad");
    site(&d);
    let (srv, admin) = start(&d, &plain("127.0.0.1:0", ""));
    let before = call(admin, "GET", "/config", &[], None);
    let etag = before.header("etag").unwrap().to_string();
    let cases: [(&str, &str, Option<&str>, u16); 8] = [
        ("PUT", "/config/server/workers", Some("\"many\""), 400),
        ("PUT", "/config/vhost/0/route/0/root", Some("\"/no/such/dir\""), 400),
        ("POST", "/config/vhost/0/route", Some(r#"{"path": "nope"}"#), 400),
        ("PATCH", "/config/vhost/9", Some("{}"), 404),
        ("DELETE", "/config/nothing/here", None, 404),
        ("PUT", "/config/server/workers", Some("null"), 400),
        ("PUT", "/config/server/workers", Some("{not json"), 400),
        ("POST", "/load", Some("[[vhost]]\nbogus = 1\n"), 400),
    ];
    for (m, p, body, want) in cases {
        let headers: &[(&str, &str)] = if p == "/load" { &[("Content-Type", "application/toml")] } else { &[] };
        let r = call(admin, m, p, headers, body);
        assert_eq!(r.status, want, "{m} {p}: {}", r.text());
        assert!(json(&r)["error"].is_string(), "{}", r.text());
    }
    let r = call(admin, "POST", "/load", &[("Content-Type", "application/toml")], Some("[[vhost]]\nbogus = 1\n"));
    let e = json(&r);
    assert_eq!((e["line"].as_u64(), e["near"].as_str()), (Some(2), Some("bogus = 1")), "{e}");
    let after = call(admin, "GET", "/config", &[], None);
    assert_eq!(after.header("etag"), Some(etag.as_str()));
    assert_eq!(after.body, before.body);
    assert_eq!(get(srv.addr, "/index.html"), 200);
    let big = "x".repeat(2 << 20);
    assert_eq!(call(admin, "POST", "/load", &[], Some(&big)).status, 413);
    assert_eq!(call(admin, "GET", "/load", &[], None).status, 405);
    // Counted.
    let m = call(admin, "GET", "/metrics", &[], None).text();
    assert!(m.contains("selvedge_config_api_changes_total{result=\"refused\"} 10"), "{m}");
    assert!(srv.said("configuration change refused by the admin API"));
}

#[test]
fn two_writers_with_one_version_one_wins() {
    let d = TempDir::new("api-etag");
    site(&d);
    let (srv, admin) = start(&d, &plain("127.0.0.1:0", ""));
    for round in 0..5 {
        let etag = call(admin, "GET", "/config", &[], None).header("etag").unwrap().to_string();
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let etag = etag.clone();
                std::thread::spawn(move || {
                    let body = format!(r#"{{"path": "/w{round}-{w}/", "respond": 204}}"#);
                    call(admin, "POST", "/config/vhost/0/route", &[("If-Match", &etag)], Some(&body)).status
                })
            })
            .collect();
        let mut got: Vec<u16> = writers.into_iter().map(|t| t.join().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [200, 412], "round {round}");
    }
    // The winners are served; `*` matches any version.
    let n = (0..5).filter(|r| (0..2).any(|w| get(srv.addr, &format!("/w{r}-{w}/")) == 204)).count();
    assert_eq!(n, 5);
    let r = call(admin, "DELETE", "/config/vhost/0/route/1", &[("If-Match", "*")], None);
    assert_eq!(r.status, 200);
    assert!(srv.said("configuration changed through the admin API"));
}

#[test]
fn the_api_answers_only_whom_it_should() {
    let d = TempDir::new("api-access");
    site(&d);
    let token = "0123456789abcdef-token";
    let (_srv, admin) = start(&d, &plain("127.0.0.1:0", &format!("token = \"{token}\"")));
    let bearer = format!("Bearer {token}");
    assert_eq!(call(admin, "GET", "/config", &[], None).status, 401);
    assert_eq!(call(admin, "GET", "/config", &[("Authorization", "Bearer wrong-token-0123456")], None).status, 401);
    assert_eq!(call(admin, "GET", "/config", &[("Authorization", &format!("Bearer {token}x"))], None).status, 401);
    let ok = call(admin, "GET", "/config", &[("Authorization", &bearer)], None);
    assert_eq!(ok.status, 200);
    assert_eq!(json(&ok)["admin"]["token"], "[redacted]", "the token is not shown");
    assert!(!ok.text().contains(token));
    // Any Host with the token; never a browser page.
    assert_eq!(
        call(admin, "GET", "/config", &[("Authorization", &bearer), ("Host", "admin.example")], None).status,
        200
    );
    let page = [("Authorization", bearer.as_str()), ("Origin", "https://evil.example")];
    assert_eq!(call(admin, "POST", "/reload", &page, Some("")).status, 403);
    assert_eq!(call(admin, "GET", "/config", &[("Sec-Fetch-Site", "cross-site")], None).status, 403);
    // Metrics ask for nothing.
    assert_eq!(call(admin, "GET", "/metrics", &[], None).status, 200);

    // Without a token: loopback, and a Host a local client sends.
    let d2 = TempDir::new("api-access2");
    site(&d2);
    let (_srv2, admin2) = start(&d2, &plain("127.0.0.1:0", ""));
    assert_eq!(call(admin2, "GET", "/config", &[], None).status, 200);
    assert_eq!(call(admin2, "GET", "/config", &[("Host", &admin2.to_string())], None).status, 200);
    assert_eq!(call(admin2, "GET", "/config", &[("Host", "[::1]:2019")], None).status, 200);
    assert_eq!(call(admin2, "GET", "/config", &[("Host", "rebound.example:2019")], None).status, 403);
    assert_eq!(call(admin2, "GET", "/config", &[("Host", "localhost.evil.example")], None).status, 403);

    // A public listener without a token: status and metrics, never the API.
    let d3 = TempDir::new("api-access3");
    site(&d3);
    let (_srv3, admin3) = start(&d3, &plain("0.0.0.0:0", "public = true"));
    let admin3 = SocketAddr::from(([127, 0, 0, 1], admin3.port()));
    assert_eq!(call(admin3, "GET", "/metrics", &[], None).status, 200);
    assert_eq!(call(admin3, "GET", "/config", &[], None).status, 403);
    assert_eq!(call(admin3, "POST", "/stop", &[], Some("")).status, 403);

    // A short token is refused at load.
    let short = d.write("short.toml", plain("127.0.0.1:0", "token = \"short\""));
    let out = Command::new(BIN).args(["check", "-c", short.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16"));
}

#[test]
fn persisted_changes_survive_a_reload_and_others_are_undone_with_a_warning() {
    // persist = the configuration file: SIGHUP rereads what the API wrote.
    let d = TempDir::new("api-persist");
    site(&d);
    let (srv, admin) = start(&d, &plain("127.0.0.1:0", "persist = \"selvedge.toml\""));
    let r = call(admin, "POST", "/config/vhost/0/route", &[], Some(r#"{"path": "/kept/", "respond": 204}"#));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(json(&r)["persisted"].as_str().unwrap().ends_with("selvedge.toml"));
    let file = std::fs::read_to_string(d.path().join("selvedge.toml")).unwrap();
    assert!(file.contains("/kept/"), "{file}");
    let bak = std::fs::read_to_string(d.path().join("selvedge.toml.bak")).unwrap();
    assert!(!bak.contains("/kept/"));
    let etag = call(admin, "GET", "/config", &[], None).header("etag").unwrap().to_string();
    srv.signal("HUP");
    eventually(10, "the reload", || srv.said("reloaded configuration"));
    assert_eq!(get(srv.addr, "/kept/"), 204);
    assert_eq!(call(admin, "GET", "/config", &[], None).header("etag"), Some(etag.as_str()));
    assert!(!srv.said("replaced"));
    // The file written is a valid configuration for `selvedge check`.
    let out =
        Command::new(BIN).args(["check", "-c", d.path().join("selvedge.toml").to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // In memory only: SIGHUP puts the file back, and says so.
    let d2 = TempDir::new("api-memory");
    site(&d2);
    let (srv2, admin2) = start(&d2, &plain("127.0.0.1:0", ""));
    call(admin2, "POST", "/config/vhost/0/route", &[], Some(r#"{"path": "/gone/", "respond": 204}"#));
    assert_eq!(get(srv2.addr, "/gone/"), 204);
    srv2.signal("HUP");
    eventually(10, "the reload", || srv2.said("reloaded configuration"));
    assert_eq!(get(srv2.addr, "/gone/"), 404);
    assert!(srv2.said("replaced 1 change(s) made through the admin API"));
    assert!(call(admin2, "GET", "/config/vhost/0/route/1", &[], None).status == 404);
}

#[test]
fn the_command_line_talks_to_the_running_server() {
    let d = TempDir::new("api-cli");
    site(&d);
    // The command reads the admin address from the file: a port of its own, not 0.
    let port = free_port();
    let (mut srv, _) = start(&d, &plain(&format!("127.0.0.1:{port}"), "token = \"cli-token-0123456789\""));
    let f = d.path().join("selvedge.toml");
    let cli = |args: &[&str]| {
        let out = Command::new(BIN).args(args).args(["-c", f.to_str().unwrap()]).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["config", "set", "vhost/0/route/1", r#"{"path": "/cli/", "respond": 204}"#]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("etag"), "{out}");
    assert_eq!(get(srv.addr, "/cli/"), 204);
    let (code, out, _) = cli(&["config", "get", "vhost/0/route/1/path"]);
    assert_eq!((code, out.trim()), (Some(0), "\"/cli/\""));
    let (code, _, err) = cli(&["config", "set", "server/workers", "\"many\""]);
    assert_eq!(code, Some(1));
    assert!(err.contains("400") && err.contains("whole number"), "{err}");
    let (code, _, err) = cli(&["config", "set", "server/workers", "many"]);
    assert_eq!(code, Some(2), "not JSON: refused before asking: {err}");
    let load = d.write("new.toml", plain("127.0.0.1:0", "").replace("root = \"site\"", "respond = 418"));
    let (code, _, err) = cli(&["config", "load", load.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(get(srv.addr, "/anything"), 418);
    let (code, _, err) = cli(&["reload"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(get(srv.addr, "/index.html"), 200, "the file again");
    let (code, _, err) = cli(&["config", "delete", "vhost/0/route/7"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("404"), "{err}");
    let (code, _, err) = cli(&["stop"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(srv.wait_exit(10), Some(0));

    // No admin listener: reload and stop signal the process in the pid file.
    let d2 = TempDir::new("api-cli-signal");
    site(&d2);
    let text = plain("127.0.0.1:0", "").replace("[admin]\nlisten = \"127.0.0.1:0\"\napi = true\n", "");
    let f2 = d2.write("selvedge.toml", &text);
    let mut srv2 = Srv::start(&["run", "-c", f2.to_str().unwrap()]);
    let out = Command::new(BIN).args(["reload", "-c", f2.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("sent SIGHUP"));
    eventually(10, "the reload", || srv2.said("reloaded configuration"));
    let out = Command::new(BIN).args(["stop", "-c", f2.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(srv2.wait_exit(10), Some(0));
    let out = Command::new(BIN).args(["config", "get", "-c", f2.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "the API needs the admin listener");

    // An admin listener without the API: the signal too.
    let d3 = TempDir::new("api-cli-off");
    site(&d3);
    let port = free_port();
    let text = plain(&format!("127.0.0.1:{port}"), "").replace("api = true\n", "");
    let f3 = d3.write("selvedge.toml", &text);
    let mut srv3 = Srv::start(&["run", "-c", f3.to_str().unwrap()]);
    admin_addr(&srv3);
    let out = Command::new(BIN).args(["stop", "-c", f3.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("sent SIGTERM"));
    assert_eq!(srv3.wait_exit(10), Some(0));
}

#[test]
fn fifty_changes_under_load_drop_nothing() {
    if !common::have("wrk") {
        return common::missing_tool("wrk", "fifty_changes_under_load_drop_nothing");
    }
    let d = TempDir::new("api-load");
    site(&d);
    let (srv, admin) = start(&d, &plain("127.0.0.1:0", "").replace("workers = 1", "workers = 2"));
    let done = Arc::new(AtomicBool::new(false));
    let wrk = {
        let url = format!("http://{}/index.html", srv.addr);
        std::thread::spawn(move || Command::new("wrk").args(["-t1", "-c20", "-d6s", &url]).output().unwrap())
    };
    let changer = {
        let (done, addr) = (done.clone(), srv.addr);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            // The routes after the first, as the configuration has them.
            let mut routes: Vec<usize> = Vec::new();
            for i in 0..50 {
                let body = format!(r#"{{"path": "/r{i}/", "respond": {{"status": 200, "body": "r{i}"}}}}"#);
                let r = call(admin, "POST", "/config/vhost/0/route", &[], Some(&body));
                assert_eq!(r.status, 200, "{}", r.text());
                routes.push(i);
                // In force as soon as the change is answered, whole.
                assert_eq!(get(addr, &format!("/r{i}/")), 200, "change {i}");
                if i % 2 == 1 {
                    let at = routes.iter().position(|&r| r == i - 1).unwrap();
                    routes.remove(at);
                    let path = format!("/config/vhost/0/route/{}", at + 1);
                    assert_eq!(call(admin, "DELETE", &path, &[], None).status, 200);
                    assert_eq!(get(addr, &format!("/r{}/", i - 1)), 404);
                    assert_eq!(get(addr, &format!("/r{i}/")), 200);
                }
                std::thread::sleep(Duration::from_millis(60));
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    changer.join().unwrap();
    assert!(done.load(Ordering::Relaxed));
    let out = wrk.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Socket errors") && !text.contains("Non-2xx"), "{text}");
    assert!(text.contains("requests in"), "{text}");
}

/// A `selvedge` answering every request with `body`.
fn answering(d: &TempDir, name: &str, body: &str) -> Srv {
    let f = d.write(
        &format!("{name}.toml"),
        format!(
            "[server]\nworkers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n[[vhost]]\n[[vhost.route]]\npath = \
             \"/\"\nrespond = {{ status = 200, body = \"{body}\" }}\n"
        ),
    );
    Srv::start(&["run", "-c", f.to_str().unwrap()])
}

#[test]
fn pool_servers_come_and_go_at_runtime_and_in_flight_requests_finish() {
    let d = TempDir::new("api-pools");
    site(&d);
    // A: the scripted upstream (its echoes carry X-Conn; /hold answers once the test
    // releases it); B and C answer "b", "c".
    let mut a = Reaped(
        Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy_upstream.py"))
            .arg("0")
            .arg(d.path().join("capture.bin"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(a.0.stdout.take().unwrap()), &mut line).unwrap();
    let a_port: u16 = line.trim().parse().unwrap();
    let b = answering(&d, "b", "b");
    let c = answering(&d, "c", "c");
    let a_url = format!("http://127.0.0.1:{a_port}");
    let extra = format!(
        "[[vhost.route]]\npath = \"/app/\"\nproxy = {{ name = \"app\", strip_prefix = true, upstreams = [\"{a_url}\", \"http://{}\"] }}\n",
        b.addr
    );
    let (srv, admin) = start(&d, &format!("{}{extra}", plain("127.0.0.1:0", "")));
    let fetch = |path: &str| request(srv.addr, &format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"));

    let list = json(&call(admin, "GET", "/upstreams", &[], None));
    let app = &list["pools"][0];
    assert_eq!((app["name"].as_str(), app["config"].as_str()), (Some("app"), Some("vhost/0/route/1/proxy")), "{list}");
    assert_eq!(app["servers"][0]["url"], a_url);
    assert_eq!(app["servers"][0]["members"][0]["healthy"], true, "{list}");
    assert_eq!(app["requests"], 0, "{list}");

    // Requests in flight on A when it is removed finish; none goes to A afterwards.
    let started = std::time::Instant::now();
    let slow: Vec<_> = (0..4)
        .map(|_| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                let r = request(addr, "GET /app/hold HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
                // A holds until released; B answers at once.
                (r.status, r.text() != "b", started.elapsed())
            })
        })
        .collect();
    let capture = d.path().join("capture.bin");
    eventually(10, "A has requests in flight", || {
        std::fs::read(&capture).is_ok_and(|b| b.windows(9).filter(|w| w == b"GET /hold").count() >= 2)
    });
    let removed_at = started.elapsed();
    let removed = call(admin, "DELETE", &format!("/upstreams/app/servers/127.0.0.1:{a_port}"), &[], None);
    assert_eq!(removed.status, 200, "{}", removed.text());
    std::fs::write(d.path().join("capture.bin.release"), "").unwrap();
    let answers: Vec<_> = slow.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(answers.iter().all(|(s, _, _)| *s == 200), "{answers:?}");
    let on_a: Vec<_> = answers.iter().filter(|(_, a, _)| *a).collect();
    assert!(!on_a.is_empty(), "round robin sent some to A: {answers:?}");
    assert!(
        on_a.iter().all(|(_, _, t)| *t > removed_at),
        "A's answers came after its removal began: {answers:?} {removed_at:?}"
    );
    for _ in 0..20 {
        let r = fetch("/app/x");
        assert_eq!((r.status, r.header("x-conn").is_none()), (200, true), "{r:?}");
    }
    let list = json(&call(admin, "GET", "/upstreams", &[], None));
    assert!(list["pools"][0]["requests"].as_u64().unwrap() >= 24, "the route's counters: {list}");
    // C added: it takes its share.
    let added = call(
        admin,
        "POST",
        "/upstreams/app/servers",
        &[],
        Some(&format!("{{\"url\": \"http://{}\", \"weight\": 2}}", c.addr)),
    );
    assert_eq!(added.status, 200, "{}", added.text());
    let bodies: Vec<String> = (0..30).map(|_| fetch("/app/x").text()).collect();
    assert!(bodies.iter().any(|b| b == "c") && bodies.iter().any(|b| b == "b"), "{bodies:?}");
    // Refusals: the last server, an unknown pool or server, a server already there.
    let b_addr = b.addr.to_string();
    assert_eq!(call(admin, "DELETE", &format!("/upstreams/app/servers/{b_addr}"), &[], None).status, 200);
    assert_eq!(call(admin, "DELETE", &format!("/upstreams/app/servers/{}", c.addr), &[], None).status, 409);
    assert_eq!(call(admin, "DELETE", "/upstreams/app/servers/127.0.0.1:1", &[], None).status, 404);
    assert_eq!(call(admin, "POST", "/upstreams/nope/servers", &[], Some("\"http://127.0.0.1:1\"")).status, 404);
    let again = format!("\"http://{}\"", c.addr);
    assert_eq!(call(admin, "POST", "/upstreams/app/servers", &[], Some(&again)).status, 400);
    assert_eq!(call(admin, "POST", "/upstreams/app/servers", &[], Some("\"ftp://x\"")).status, 400);
    // Under load: servers added and removed twenty times, nothing fails.
    if !common::have("wrk") {
        return common::missing_tool("wrk", "pool_servers_come_and_go_at_runtime");
    }
    let url = format!("http://{}/app/x", srv.addr);
    let wrk = std::thread::spawn(move || Command::new("wrk").args(["-t1", "-c16", "-d4s", &url]).output().unwrap());
    std::thread::sleep(Duration::from_millis(300));
    let b_json = format!("\"http://{b_addr}\"");
    for _ in 0..20 {
        assert_eq!(call(admin, "POST", "/upstreams/app/servers", &[], Some(&b_json)).status, 200);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(call(admin, "DELETE", &format!("/upstreams/app/servers/{b_addr}"), &[], None).status, 200);
        std::thread::sleep(Duration::from_millis(60));
    }
    let out = wrk.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Socket errors") && !text.contains("Non-2xx"), "{text}");
}

/// A child process killed and reaped when dropped.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn client_certificates_open_the_api_on_a_public_address() {
    if !common::have("openssl") || !common::have("curl") {
        return common::missing_tool("openssl and curl", "client_certificates_open_the_api_on_a_public_address");
    }
    let d = TempDir::new("api-mtls");
    site(&d);
    let dir = d.path().to_str().unwrap().to_string();
    let sh = |script: &str| {
        let out = Command::new("bash").arg("-c").arg(script).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let key = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
    // Two CAs: the operators' and another; a client certificate from each; the server's own.
    sh(&format!("{key} -subj /CN=operators -keyout ca.key -out ca.pem 2>/dev/null"));
    sh(&format!("{key} -subj /CN=others -keyout other-ca.key -out other-ca.pem 2>/dev/null"));
    // Version 3 client certificates (webpki takes no other).
    d.write("ext.cnf", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n");
    for (name, ca) in [("client", "ca"), ("stranger", "other-ca")] {
        sh(&format!(
            "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN={name} -keyout {name}.key \
             -out {name}.csr 2>/dev/null && openssl x509 -req -in {name}.csr -CA {ca}.pem -CAkey {ca}.key \
             -CAcreateserial -days 2 -extfile ext.cnf -out {name}.pem 2>/dev/null"
        ));
    }
    sh(&format!(
        "{key} -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 -keyout srv.key -out srv.pem 2>/dev/null"
    ));
    let tls = "public = true\ntls = { cert = \"srv.pem\", key = \"srv.key\", client_ca = \"ca.pem\" }";
    let f = d.write("selvedge.toml", plain("0.0.0.0:0", tls));
    let srv = Srv::start(&["run", "-c", f.to_str().unwrap()]);
    eventually(10, "the admin line", || srv.said("admin listener on https://"));
    let line = srv.stderr.lock().unwrap().iter().find(|l| l.contains("admin listener on https://")).unwrap().clone();
    let rest = &line[line.find("https://").unwrap() + 8..];
    let port = rest[..rest.find('/').unwrap()].rsplit(':').next().unwrap().to_string();
    let curl = |args: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "curl -s --cacert srv.pem -o /dev/null -w '%{{http_code}}' {args} https://127.0.0.1:{port}/config"
            ))
            .current_dir(&dir)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl("--cert client.pem --key client.key"), "200", "an operator's certificate");
    assert_eq!(curl(""), "000", "no certificate: no handshake");
    assert_eq!(curl("--cert stranger.pem --key stranger.key"), "000", "another CA's certificate");
    assert_eq!(curl("--cert client.pem --key client.key -H 'Origin: https://evil.example'"), "403");

    // A CA file that holds no certificate is refused at load.
    let bad = d.write(
        "bad.toml",
        plain("127.0.0.1:0", "tls = { cert = \"srv.pem\", key = \"srv.key\", client_ca = \"srv.key\" }"),
    );
    let out = Command::new(BIN).args(["check", "-c", bad.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn what_an_attacker_tried_is_refused() {
    let d = TempDir::new("api-attacks");
    site(&d);
    let extra = "[[vhost.route]]\npath = \"/p/\"\nproxy = { upstream = \"http://127.0.0.1:9\", header_up = { Authorization = \"Bearer s3cretUpstreamPw\" } }\n";
    let (srv, admin) = start(&d, &format!("{}{extra}", plain("127.0.0.1:0", "")));
    // A path deep enough to overflow a stack when its tables are made: refused.
    let deep = "/a".repeat(3000);
    let r = call(admin, "PUT", &format!("/config{deep}"), &[], Some("1"));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(call(admin, "GET", "/config/server", &[], None).status, 200, "alive");
    // The environment is the file's: a new ${VAR} is refused and nothing of it comes back.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for v in ["\"${HOME}\"", "\"${HOME:-\\n\\n\\n\\n}\"", "\"x${PATH}\""] {
        let r = call(admin, "PUT", "/config/server/workers", &[], Some(v));
        assert_eq!(r.status, 400, "{v}: {}", r.text());
        assert!(!r.text().contains(&home) && r.text().contains("references"), "{v}: {}", r.text());
    }
    // A refused change of a rendered document names no line's text (it could be a secret's).
    let r = call(admin, "PUT", "/config/vhost/0/route/1/proxy/retries", &[], Some("\"many\""));
    assert_eq!(r.status, 400);
    assert!(json(&r).get("near").is_none() && !r.text().contains("s3cret"), "{}", r.text());
    assert!(!call(admin, "GET", "/config", &[], None).text().contains("s3cret"));
    // Versions are keyed per process: another server with the same file has other tags.
    let (_srv2, admin2) = start(&d, &format!("{}{extra}", plain("127.0.0.1:0", "")));
    let tag = |a| call(a, "GET", "/config", &[], None).header("etag").unwrap().to_string();
    assert_ne!(tag(admin), tag(admin2));
    // A FIFO or an endless file as an error page does not stall the change.
    let fifo = d.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let t = std::time::Instant::now();
    for page in [fifo.to_str().unwrap(), "/dev/zero"] {
        let body = format!("{{\"404\": \"{page}\"}}");
        let r = call(admin, "PUT", "/config/vhost/0/route/0/error_pages", &[], Some(&body));
        assert!(r.status == 200 || r.status == 400, "{}", r.text());
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A user that does not exist is refused (the server could not restart with it).
    let r = call(admin, "PUT", "/config/server/user", &[], Some("\"no-such-user-here\""));
    assert_eq!(r.status, 400, "{}", r.text());
    // The access log set through the API is opened at once.
    let log = d.path().join("api-access.log");
    let body = format!("{{\"access\": \"{}\"}}", log.display());
    assert_eq!(call(admin, "PUT", "/config/log", &[], Some(&body)).status, 200);
    get(srv.addr, "/index.html");
    eventually(10, "the access log line", || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("/index.html")));
    // A purge follows the API's rules.
    let purge = |h: &[(&str, &str)]| call(admin, "POST", "/cache/purge?prefix=http", h, Some("")).status;
    assert_eq!(purge(&[("Origin", "https://evil.example")]), 403);
    assert_eq!(purge(&[("Host", "evil.example")]), 403);
    assert_eq!(purge(&[]), 200);
    // Refusals are logged.
    assert!(srv.said("admin API request refused"));
}

#[test]
fn the_api_is_off_unless_asked_for() {
    let d = TempDir::new("api-off");
    site(&d);
    let text = plain("127.0.0.1:0", "").replace("api = true\n", "");
    let (_srv, admin) = start(&d, &text);
    assert_eq!(call(admin, "GET", "/config", &[], None).status, 404);
    assert_eq!(call(admin, "POST", "/stop", &[], Some("")).status, 404);
    assert_eq!(call(admin, "GET", "/upstreams", &[], None).status, 404);
    assert_eq!(call(admin, "GET", "/metrics", &[], None).status, 200);
}

#[test]
fn a_unix_socket_needs_no_local_host_name() {
    if !common::have("curl") {
        return common::missing_tool("curl", "a_unix_socket_needs_no_local_host_name");
    }
    let d = TempDir::new("api-unix");
    site(&d);
    let sock = d.path().join("admin.sock");
    let text = plain(&format!("unix:{}", sock.display()), "");
    let f = d.write("selvedge.toml", text);
    let _srv = Srv::start(&["run", "-c", f.to_str().unwrap()]);
    eventually(10, "the socket", || sock.exists());
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--unix-socket",
            sock.to_str().unwrap(),
            "http://x/config",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
}

#[test]
fn persisting_keeps_the_file_private_and_follows_no_link() {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new("api-persist-safe");
    site(&d);
    let (_srv, admin) =
        start(&d, &plain("127.0.0.1:0", "persist = \"selvedge.toml\"\ntoken = \"private-token-0123456789\""));
    let f = d.path().join("selvedge.toml");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Links planted where the backup goes: replaced, their targets untouched.
    let victim = d.write("victim", "untouched");
    std::os::unix::fs::symlink(&victim, d.path().join("selvedge.toml.bak")).unwrap();
    let auth = [("Authorization", "Bearer private-token-0123456789")];
    let r = call(admin, "PUT", "/config/server/workers", &auth, Some("1"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(json(&r)["persisted"].is_string(), "{}", r.text());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
    let bak = d.path().join("selvedge.toml.bak");
    assert!(std::fs::symlink_metadata(&bak).unwrap().is_file());
    for p in [&f, &bak] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
    }
    assert!(std::fs::read_to_string(&f).unwrap().contains("private-token-0123456789"), "the token is kept");
    // No temporary file left behind.
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_command_line_encodes_paths_and_checks_the_pid_it_signals() {
    let d = TempDir::new("api-cli-safe");
    site(&d);
    let port = free_port();
    let (srv, admin) = start(&d, &plain(&format!("127.0.0.1:{port}"), ""));
    let f = d.path().join("selvedge.toml");
    let out = Command::new(BIN)
        .args(["config", "set", "vhost/0/route/0/headers/X#Y", "\"v\"", "-c", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let headers = json(&call(admin, "GET", "/config/vhost/0/route/0/headers", &[], None));
    assert_eq!(headers, serde_json::json!({ "X#Y": "v" }));
    // A line break in a path is a key's, not a second request.
    let out = Command::new(BIN)
        .args([
            "config",
            "get",
            "vhost HTTP/1.1\r\nHost: localhost\r\n\r\nPOST /stop HTTP/1.1\r\nX: y",
            "-c",
            f.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(srv.addr, "/index.html"), 200, "still serving");
    // A stale pid file naming another process: not signalled.
    let mut other = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let d2 = TempDir::new("api-cli-stale");
    let f2 = d2.write(
        "selvedge.toml",
        format!(
            "[server]\npid_file = \"{}\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = 204\n",
            d2.path().join("s.pid").display()
        ),
    );
    d2.write("s.pid", other.0.id().to_string());
    let out = Command::new(BIN).args(["stop", "-c", f2.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not selvedge"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(other.0.try_wait().unwrap().is_none(), "the other process lives");
}

#[test]
fn rate_limits_count_on_across_changes() {
    let d = TempDir::new("api-rate");
    site(&d);
    let text = plain("127.0.0.1:0", "")
        .replace("root = \"site\"\n", "root = \"site\"\nrate = { requests = 3, per = \"1h\" }\n");
    let (srv, admin) = start(&d, &text);
    let statuses = |n| (0..n).map(|_| get(srv.addr, "/index.html")).collect::<Vec<_>>();
    assert_eq!(statuses(4), [200, 200, 200, 429]);
    // Other routes change; the limited one's clients stay counted.
    for i in 0..3 {
        let body = format!(r#"{{"path": "/x{i}/", "respond": 204}}"#);
        assert_eq!(call(admin, "POST", "/config/vhost/0/route", &[], Some(&body)).status, 200);
        assert_eq!(get(srv.addr, "/index.html"), 429, "after change {i}");
    }
    srv.signal("HUP");
    eventually(10, "the reload", || srv.said("reloaded configuration"));
    assert_eq!(get(srv.addr, "/index.html"), 429, "after a reload");
    // A new limit is a new count.
    let r = call(admin, "PUT", "/config/vhost/0/route/0/rate", &[], Some(r#"{"requests": 5, "per": "1h"}"#));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(srv.addr, "/index.html"), 200);
}

#[test]
fn what_a_second_attacker_tried_is_refused() {
    let d = TempDir::new("api-attacks2");
    site(&d);
    let extra = "[[vhost.route]]\npath = \"/p/\"\nproxy = { name = \"p\", upstreams = [\"http://127.0.0.1:9\", \"unix:/tmp/nowhere.sock\"], header_up = { Authorization = \"Bearer ${SELVEDGE_TEST_SECRET}\" } }\n";
    let f = d.write("selvedge.toml", format!("{}{extra}", plain("127.0.0.1:0", "")));
    let mut cmd = Command::new(BIN);
    common::clean_env(&mut cmd);
    cmd.args(["run", "-c", f.to_str().unwrap()]).env("SELVEDGE_TEST_SECRET", "topsecret123");
    let srv = Srv::spawn(cmd);
    let admin = admin_addr(&srv);
    let leaks = |r: &Resp| r.text().contains("topsecret123");
    // ${VAR} in keys, in a loaded file's comments, or copied to a second place: refused.
    let tries: [(&str, &str, &str, &str); 5] = [
        ("PATCH", "/config/server", "application/json", r#"{"${SELVEDGE_TEST_SECRET}": 1}"#),
        ("PUT", "/config/vhost/0/route/0/headers", "application/json", r#"{"X-${SELVEDGE_TEST_SECRET}": "1"}"#),
        (
            "POST",
            "/load",
            "application/toml",
            "[server]\nworkers = 1\n# ${HOME}\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = 204\n",
        ),
        ("POST", "/load", "application/toml", "[server]\n\"${HOME}\" = 1\n"),
        (
            "POST",
            "/config/vhost/0/route",
            "application/json",
            r#"{"path": "/leak/", "respond": {"status": 200, "body": "Bearer ${SELVEDGE_TEST_SECRET}"}}"#,
        ),
    ];
    for (m, p, ct, body) in tries {
        let r = call(admin, m, p, &[("Content-Type", ct)], Some(body));
        assert_eq!(r.status, 400, "{m} {p} {body}: {}", r.text());
        assert!(!leaks(&r) && !r.text().contains("/root"), "{}", r.text());
    }
    assert_eq!(get(srv.addr, "/leak/"), 404);
    // A redirect's captures are not the environment's.
    let r = call(admin, "POST", "/config/vhost/0/redirect", &[], Some(r#"{"from": "^/old/(.*)$", "to": "/new/${1}"}"#));
    assert_eq!(r.status, 200, "{}", r.text());
    // Moving a route that reads a variable keeps it (the count stays).
    let route = call(admin, "GET", "/config/vhost/0/route/1", &[], None);
    assert_eq!(route.status, 200);
    // Under a secret's key, every path down is redacted.
    for p in ["/config/vhost/0/route/1/proxy/header_up/Authorization", "/config/vhost/0/route/1/proxy/header_up"] {
        let r = call(admin, "GET", p, &[], None);
        assert!(r.status == 200 && !leaks(&r) && !r.text().contains("SELVEDGE_TEST_SECRET"), "{p}: {}", r.text());
    }
    // A FIFO as a certificate: the change fails within the check's time, the server stays
    // whole and stops on SIGTERM.
    let fifo = d.path().join("cert.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let body = format!(r#"{{"hosts": ["a.example"], "tls": {{"cert": "{0}", "key": "{0}"}}}}"#, fifo.display());
    let t = std::time::Instant::now();
    let r = call(admin, "PATCH", "/config/vhost/0", &[], Some(&body));
    assert!(r.status == 400 || r.status == 503, "{}", r.text());
    assert!(t.elapsed() < Duration::from_secs(12), "{:?}", t.elapsed());
    assert_eq!(get(srv.addr, "/index.html"), 200);
    // A unix: server is named by its path, never by the scheme alone.
    assert_eq!(call(admin, "DELETE", "/upstreams/p/servers/unix:", &[], None).status, 404);
    assert_eq!(call(admin, "DELETE", "/upstreams/p/servers/%2Ftmp%2Fnowhere.sock", &[], None).status, 200);
    // Too many upstreams in one pool.
    let many: Vec<String> = (0..1100).map(|i| format!("\"http://127.0.0.1:{}\"", 10000 + i)).collect();
    let r = call(admin, "PUT", "/config/vhost/0/route/1/proxy/upstreams", &[], Some(&format!("[{}]", many.join(","))));
    assert_eq!(r.status, 400, "{}", r.text());
    // Every answer names the version in force.
    assert!(r.header("etag").is_some());
    let mut srv = srv;
    srv.signal("TERM");
    assert_eq!(srv.wait_exit(15), Some(0));
}
