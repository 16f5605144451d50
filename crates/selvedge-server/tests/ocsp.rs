//! OCSP stapling for certificates given as files: a CA, two leaves naming its responder
//! (one with Must-Staple) made by `openssl`, and `openssl ocsp` answering from an index file
//! the test writes. Checked with `openssl s_client -status`. (ACME certificates, and the
//! replacement of a revoked one, are in `acme.rs`.)

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::*;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `openssl ocsp` for the test CA, its output lines collected.
struct Responder {
    child: Child,
}

impl Responder {
    fn start(dir: &Path, port: u16) -> Responder {
        let mut child = Command::new("openssl")
            .current_dir(dir)
            .args(["ocsp", "-index", "index.txt", "-port", &port.to_string(), "-rsigner", "ca.pem"])
            .args(["-rkey", "ca.key", "-CA", "ca.pem", "-nmin", "1", "-ignore_err"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        for r in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let l = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    l.lock().unwrap().push(line);
                }
            });
        }
        // Not a test connection: `openssl ocsp` waits forever on one that closes without a
        // request.
        let l = lines.clone();
        let listening = || l.lock().unwrap().iter().any(|x| x.contains("waiting for OCSP"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !listening() {
            let exited = child.try_wait().unwrap();
            assert!(
                exited.is_none() && std::time::Instant::now() < deadline,
                "openssl ocsp is not listening on {port} (exit: {exited:?}): {:?}",
                l.lock().unwrap()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Responder { child }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The serial (upper-case hex) of a PEM certificate.
fn serial(dir: &Path, cert: &str) -> String {
    let out =
        Command::new("openssl").current_dir(dir).args(["x509", "-noout", "-serial", "-in", cert]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().trim_start_matches("serial=").to_ascii_uppercase()
}

fn index_line(serial: &str, revoked: bool) -> String {
    if revoked {
        format!("R\t491231235959Z\t250101000000Z\t{serial}\tunknown\t/CN=x\n")
    } else {
        format!("V\t491231235959Z\t\t{serial}\tunknown\t/CN=x\n")
    }
}

fn s_client(port: u16, name: &str, ca: &Path) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-status", "-connect", &format!("127.0.0.1:{port}"), "-servername", name])
        .args(["-CAfile", ca.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn log_has(srv: &Srv, pat: &str) -> bool {
    srv.stderr.lock().unwrap().iter().any(|l| l.contains(pat))
}

#[test]
fn file_certificates_get_staples_must_staple_is_reported_and_revocation_logged() {
    let dir = TempDir::new("ocsp-files");
    let d = dir.path();
    let ocsp_port = free_port();
    let tls_port = free_port();
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=selvedge test OCSP CA",
            "-days",
            "2",
        ],
    );
    // c.test's responder takes connections and never answers: it must hold back no other
    // certificate's staple.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming() {
            held.push(c);
        }
    });
    for (name, extra, port) in
        [("a", "", ocsp_port), ("b", "tlsfeature=status_request\n", ocsp_port), ("c", "", silent_port)]
    {
        dir.write(
            &format!("{name}.ext"),
            format!("authorityInfoAccess=OCSP;URI:http://127.0.0.1:{port}\nsubjectAltName=DNS:{name}.test\n{extra}"),
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}.test"),
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
        let chain = std::fs::read_to_string(d.join(format!("{name}.crt"))).unwrap()
            + &std::fs::read_to_string(d.join("ca.pem")).unwrap();
        dir.write(&format!("{name}.chain.pem"), chain);
    }
    let (sa, sb) = (serial(d, "a.crt"), serial(d, "b.crt"));
    dir.write("index.txt.attr", "unique_subject = no\n");
    dir.write("index.txt", index_line(&sa, false) + &index_line(&sb, false));
    dir.write("site/index.html", "ok\n");
    let mut cfg = format!("[[listen]]\nport = {tls_port}\ntls = {{}}\n");
    for name in ["a", "b", "c"] {
        cfg.push_str(&format!(
            "[[vhost]]\nhosts = [\"{name}.test\"]\ntls = {{ cert = \"{name}.chain.pem\", key = \"{name}.key\" }}\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
        ));
    }
    let cfg = dir.write("selvedge.toml", cfg);
    // The responder is down at first: the Must-Staple certificate's missing staple is an error.
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    eventually(15, "the Must-Staple error", || {
        log_has(&srv, "error: Must-Staple certificate without a staple: OCSP for b.test")
    });
    assert!(log_has(&srv, "OCSP for a.test"), "{:?}", srv.stderr.lock().unwrap());
    assert!(s_client(tls_port, "a.test", &d.join("ca.pem")).contains("OCSP response: no response sent"));
    let _responder = Responder::start(d, ocsp_port);
    // Retried after 5 s: both stapled, good, while c.test's fetch hangs for 10 s.
    eventually(8, "both stapled", || {
        log_has(&srv, &format!("stapling a good answer for a.test (serial {})", sa.to_ascii_lowercase()))
            && log_has(&srv, &format!("stapling a good answer for b.test (serial {})", sb.to_ascii_lowercase()))
    });
    for name in ["a.test", "b.test"] {
        let out = s_client(tls_port, name, &d.join("ca.pem"));
        assert!(out.contains("OCSP Response Status: successful") && out.contains("Cert Status: good"), "{name}: {out}");
    }
    // A reload puts the current staples back at once, whatever is being fetched.
    srv.signal("HUP");
    eventually(5, "the reload", || log_has(&srv, "reloaded configuration"));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(s_client(tls_port, "a.test", &d.join("ca.pem")).contains("Cert Status: good"));
    assert!(s_client(tls_port, "c.test", &d.join("ca.pem")).contains("OCSP response: no response sent"));
    // Revoked: logged at the next fetch (about 30 s later), stapled as it is, not replaced.
    dir.write("index.txt", index_line(&sa, true) + &index_line(&sb, false));
    eventually(60, "the revocation logged", || {
        log_has(
            &srv,
            &format!(
                "error: the certificate for a.test (serial {}) is REVOKED, says its OCSP responder",
                sa.to_ascii_lowercase()
            ),
        )
    });
    assert!(!log_has(&srv, "ordering a replacement"));
    let out = s_client(tls_port, "a.test", &d.join("ca.pem"));
    assert!(out.contains("Cert Status: revoked"), "{out}");
    assert!(s_client(tls_port, "b.test", &d.join("ca.pem")).contains("Cert Status: good"));
}
