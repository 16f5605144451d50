//! The server over TLS: `serve --tls-cert/--tls-key`, TLS listeners and a redirect listener
//! from the config, HSTS, certificate reload on SIGHUP under load, and the bundled site in
//! a real browser (headless Chromium) over HTTP/2.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

fn cert(dir: &Path, name: &str, file: &str) -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let (c, k) = (dir.join(format!("{file}.crt")), dir.join(format!("{file}.key")));
    std::fs::write(&c, ck.cert.pem()).unwrap();
    std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
    (c.to_str().unwrap().to_string(), k.to_str().unwrap().to_string())
}

fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl").arg("-sS").args(args).output().expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_with_tls_flags_speaks_h2_and_http11() {
    let dir = TempDir::new("tls-serve");
    dir.write("site/index.html", "<html>over tls</html>\n");
    let (c, k) = cert(dir.path(), "localhost", "a");
    let site = dir.path().join("site");
    let srv = Srv::start(&["serve", site.to_str().unwrap(), "--port", "0", "--tls-cert", &c, "--tls-key", &k]);
    let url = format!("https://localhost:{}/", srv.addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", srv.addr.port());
    for (flag, want) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let (ok, out, err) = curl(&["--cacert", &c, "--resolve", &resolve, flag, "-w", " %{http_version}", &url]);
        assert!(ok, "{err}");
        assert_eq!(out, format!("<html>over tls</html>\n {want}"));
    }
}

#[test]
fn config_tls_listener_redirect_and_hsts() {
    let dir = TempDir::new("tls-config");
    dir.write("site/index.html", "<html>hsts</html>\n");
    let (c, k) = cert(dir.path(), "localhost", "a");
    let https_port = free_port();
    let cfg = format!(
        "[server]\nhsts = \"max-age=63072000\"\n\
         [[listen]]\nport = {https_port}\ntls = {{ cert = \"{c}\", key = \"{k}\" }}\n\
         [[listen]]\nport = 0\nredirect_https = true\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
    );
    let file = dir.write("selvedge.toml", cfg);
    let srv = Srv::start(&["--config", file.to_str().unwrap()]);
    let resolve = format!("localhost:{https_port}:127.0.0.1");
    let (ok, out, err) =
        curl(&["--cacert", &c, "--resolve", &resolve, "-D", "-", &format!("https://localhost:{https_port}/")]);
    assert!(ok, "{err}");
    assert!(out.to_ascii_lowercase().contains("strict-transport-security: max-age=63072000"), "{out}");
    // The redirect listener is the cleartext address in the startup line.
    let lines = srv.stderr.lock().unwrap().join("\n");
    let addr = lines
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://").map(|r| r.trim_end_matches('/').to_string()))
        .unwrap_or_else(|| panic!("no redirect address in {lines}"));
    let (ok, out, _) = curl(&["-D", "-", "-o", "/dev/null", &format!("http://{addr}/a/b?c=1")]);
    assert!(ok);
    assert!(out.starts_with("HTTP/1.1 301"), "{out}");
    assert!(out.contains(&format!("location: https://127.0.0.1:{https_port}/a/b?c=1")), "{out}");
    assert!(!out.to_ascii_lowercase().contains("strict-transport-security"), "HSTS over cleartext: {out}");
}

#[test]
fn sighup_reloads_the_certificate_without_failing_requests() {
    let dir = TempDir::new("tls-reload");
    dir.write("site/index.html", "<html>reload</html>\n");
    let (c, k) = cert(dir.path(), "localhost", "live");
    let (old_c, _) = (dir.path().join("old.crt"), ());
    std::fs::copy(&c, &old_c).unwrap();
    let site = dir.path().join("site");
    let srv = Srv::start(&["serve", site.to_str().unwrap(), "--port", "0", "--tls-cert", &c, "--tls-key", &k]);
    let port = srv.addr.port();
    // Load over TLS while the certificate is replaced and reloaded.
    let h2load = std::thread::spawn(move || {
        Command::new("h2load").args(["-c4", "-m4", "-n4000", "-t1", &format!("https://127.0.0.1:{port}/")]).output()
    });
    std::thread::sleep(Duration::from_millis(200));
    let (nc, nk) = cert(dir.path(), "localhost", "next");
    std::fs::copy(&nc, &c).unwrap();
    std::fs::copy(&nk, &k).unwrap();
    srv.signal("HUP");
    eventually(10, "the reload", || srv.said("reloaded configuration"));
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/");
    let (ok, _, err) = curl(&["--cacert", &nc, "--resolve", &resolve, &url]);
    assert!(ok, "new certificate not served after SIGHUP: {err}");
    let (ok, _, _) = curl(&["--cacert", old_c.to_str().unwrap(), "--resolve", &resolve, &url]);
    assert!(!ok, "old certificate still served");
    if let Ok(Ok(out)) = h2load.join() {
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("requests:")).unwrap_or("");
        assert!(line.contains("4000 succeeded, 0 failed, 0 errored"), "{text}");
    }
}

#[test]
fn bundled_site_in_headless_chromium_over_h2() {
    let Some(chromium) =
        ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok())
    else {
        panic!("chromium is not installed (.ci/run installs it)");
    };
    let dir = TempDir::new("tls-chromium");
    let (c, k) = cert(dir.path(), "localhost", "a");
    let log = dir.path().join("access.log");
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/site");
    let srv =
        Srv::start(&["serve", site, "--port", "0", "--tls-cert", &c, "--tls-key", &k, "--log", log.to_str().unwrap()]);
    let url = format!("https://localhost:{}/", srv.addr.port());
    let profile = dir.path().join("profile");
    let shot = dir.path().join("shot.png");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--ignore-certificate-errors",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=800,600",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--screenshot={}", shot.display()),
            "--virtual-time-budget=3000",
            &url,
        ])
        .output()
        .unwrap();
    assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--ignore-certificate-errors",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.display()),
            "--virtual-time-budget=3000",
            "--dump-dom",
            &url,
        ])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("The script ran."), "script did not run: {dom}");
    // Stop the server so the access log is flushed, then check every resource came over h2.
    srv.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    for path in ["/ ", "/style.css ", "/app.js ", "/logo.svg "] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("\"GET {path}")))
            .unwrap_or_else(|| panic!("{path} not in the access log:\n{text}"));
        assert!(line.contains("HTTP/2.0\" 200 "), "{path} not over h2: {line}");
    }
    // Keep the screenshot for people to look at.
    let keep = std::env::temp_dir().join("selvedge-chromium-example-site.png");
    let _ = std::fs::copy(&shot, &keep);
    eprintln!("screenshot: {}", keep.display());
}

#[test]
fn virtual_hosts_get_their_own_certificates_by_sni() {
    let dir = TempDir::new("tls-vhost");
    dir.write("a/index.html", "<html>default host</html>\n");
    dir.write("b/index.html", "<html>other host</html>\n");
    let (c, k) = cert(dir.path(), "localhost", "default");
    let (oc, ok_) = cert(dir.path(), "other.test", "other");
    let port = free_port();
    let cfg = format!(
        "[[listen]]\nport = {port}\ntls = {{ cert = \"{c}\", key = \"{k}\" }}\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"a\"\n\
         [[vhost]]\nhosts = [\"other.test\"]\ntls = {{ cert = \"{oc}\", key = \"{ok_}\" }}\n\
         [[vhost.route]]\npath = \"/\"\nroot = \"b\"\n"
    );
    let file = dir.write("selvedge.toml", cfg);
    let _srv = Srv::start(&["--config", file.to_str().unwrap()]);
    let get = |name: &str, ca: &str| {
        let resolve = format!("{name}:{port}:127.0.0.1");
        curl(&["--cacert", ca, "--resolve", &resolve, &format!("https://{name}:{port}/")])
    };
    let (ok, out, err) = get("other.test", &oc);
    assert!(ok, "{err}");
    assert_eq!(out, "<html>other host</html>\n");
    let (ok, out, err) = get("localhost", &c);
    assert!(ok, "{err}");
    assert_eq!(out, "<html>default host</html>\n");
    // Each name is served its own certificate, not the other one.
    assert!(!get("other.test", &c).0);
    assert!(!get("localhost", &oc).0);
}

#[test]
fn strict_sni_refuses_unknown_names_with_an_alert() {
    let dir = TempDir::new("tls-strict");
    dir.write("a/index.html", "<html>strict</html>\n");
    let (c, k) = cert(dir.path(), "localhost", "default");
    let port = free_port();
    let cfg = format!(
        "[[listen]]\nport = {port}\ntls = {{ cert = \"{c}\", key = \"{k}\", strict_sni = true }}\n\
         [[vhost]]\nhosts = [\"localhost\"]\ntls = {{ cert = \"{c}\", key = \"{k}\" }}\n\
         [[vhost.route]]\npath = \"/\"\nroot = \"a\"\n"
    );
    let file = dir.write("selvedge.toml", cfg);
    let _srv = Srv::start(&["--config", file.to_str().unwrap()]);
    let started = std::time::Instant::now();
    let resolve = format!("unknown.test:{port}:127.0.0.1");
    let (ok, _, err) = curl(&["-k", "--resolve", &resolve, &format!("https://unknown.test:{port}/")]);
    assert!(!ok, "unknown SNI was served");
    assert!(err.contains("alert") || err.contains("unrecognized"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let resolve = format!("localhost:{port}:127.0.0.1");
    let (ok, out, err) = curl(&["--cacert", &c, "--resolve", &resolve, &format!("https://localhost:{port}/")]);
    assert!(ok, "{err}");
    assert_eq!(out, "<html>strict</html>\n");
}
