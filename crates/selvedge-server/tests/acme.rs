//! Automatic HTTPS against pebble, Let's Encrypt's ACME test server, with
//! pebble-challtestsrv resolving every test name to 127.0.0.1 (both installed by `.ci/run`
//! with `go install`): certificates obtained by TLS-ALPN-01 and HTTP-01 and served (curl
//! checks the chain against pebble's root, and the name), a renewal observed on new
//! connections while an old one stays open, two instances sharing the storage ordering
//! once (and three instances of a `[fleet]` ordering once through Redis), refused and
//! failed orders leaving the other names served, a restart reusing the
//! account and certificate, a renewal asked for by the CA's renewal information, and
//! `--check` on ACME settings.
//!
//! Pebble validates challenges by connecting to fixed ports, so these tests use fixed ports
//! below the kernel's ephemeral range (23400-23480) and run one at a time: within this
//! binary under a mutex, across processes under a lock file.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;

const ACME_PORT: u16 = 23400;
const MGMT_PORT: u16 = 23401;
const DNS_PORT: u16 = 23453;
const CHALL_MGMT_PORT: u16 = 23455;
/// BIND's, for DNS-01.
const BIND_PORT: u16 = 23454;
/// The OCSP responder's (`openssl ocsp`).
const OCSP_PORT: u16 = 23470;
/// Where pebble validates HTTP-01 ("port 80") and TLS-ALPN-01 ("port 443").
const HTTP_PORT: u16 = 23480;
const TLS_PORT: u16 = 23443;

fn go_bin(name: &str) -> Option<PathBuf> {
    let mut candidates = vec![PathBuf::from(name)];
    if let Ok(home) = std::env::var("HOME") {
        candidates.push(Path::new(&home).join("go/bin").join(name));
    }
    candidates
        .into_iter()
        .find(|c| Command::new(c).arg("-h").stderr(Stdio::null()).stdout(Stdio::null()).status().is_ok())
}

/// One pebble test at a time: in this process, and across processes (the ports are fixed).
struct Serial {
    _guard: MutexGuard<'static, ()>,
    _file: std::fs::File,
}

fn serial() -> Serial {
    static M: Mutex<()> = Mutex::new(());
    let guard = M.lock().unwrap_or_else(|p| p.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("selvedge-acme-test-ports.lock"))
        .unwrap();
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).unwrap();
    Serial { _guard: guard, _file: file }
}

/// A child process whose stdout and stderr lines are collected.
struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// When each line was read.
    times: Arc<Mutex<Vec<Instant>>>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let times = Arc::new(Mutex::new(Vec::new()));
        for r in
            [Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(child.stderr.take().unwrap())]
        {
            let (l, t) = (lines.clone(), times.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let mut l = l.lock().unwrap();
                    l.push(line);
                    t.lock().unwrap().push(Instant::now());
                }
            });
        }
        Proc { child, lines, times }
    }

    /// When the first line with `pat` was read.
    fn first_at(&self, pat: &str) -> Option<Instant> {
        let lines = self.lines.lock().unwrap();
        let i = lines.iter().position(|l| l.contains(pat))?;
        self.times.lock().unwrap().get(i).copied()
    }

    fn count(&self, pat: &str) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| l.contains(pat)).count()
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// pebble and pebble-challtestsrv, with a CA made here for pebble's own HTTPS.
struct Pebble {
    dir: TempDir,
    pebble: Proc,
    _dns: Proc,
    /// The test CA that signed pebble's HTTPS certificate (`ca_roots`).
    api_ca: PathBuf,
    /// Pebble's issuing root, fetched from its management interface.
    root: PathBuf,
    _serial: Serial,
}

struct PebbleOpts {
    /// Certificate lifetime, seconds.
    validity: u64,
    /// The DNS server pebble asks: pebble-challtestsrv's (every name is 127.0.0.1), or
    /// BIND's ([`Bind`]).
    dns_port: u16,
    /// The OCSP responder URL pebble writes into its certificates (none by default).
    ocsp_url: String,
}

impl Default for PebbleOpts {
    fn default() -> Self {
        PebbleOpts { validity: 90 * 86400, dns_port: DNS_PORT, ocsp_url: String::new() }
    }
}

fn wait_port(port: u16, what: &str) {
    eventually(20, what, || TcpStream::connect(("127.0.0.1", port)).is_ok());
}

impl Pebble {
    /// `None` (a skip) when pebble is not installed outside CI.
    fn start(opts: PebbleOpts) -> Option<Pebble> {
        let (Some(pebble), Some(chall)) = (go_bin("pebble"), go_bin("pebble-challtestsrv")) else {
            common::missing_tool("pebble", "acme");
            return None;
        };
        let serial = serial();
        let dir = TempDir::new("acme-pebble");
        // A CA for pebble's HTTPS (the ACME API and management interface).
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "selvedge test ACME API CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap()).unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.subject_alt_names.push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = p.signed_by(&key, &ca).unwrap();
        let api_ca = dir.write("api-ca.pem", AsRef::<rcgen::Certificate>::as_ref(&ca).pem());
        let cert = dir.write("pebble.crt", leaf.pem());
        let key = dir.write("pebble.key", key.serialize_pem());
        let config = format!(
            r#"{{"pebble": {{
                "listenAddress": "127.0.0.1:{ACME_PORT}",
                "managementListenAddress": "127.0.0.1:{MGMT_PORT}",
                "certificate": "{}", "privateKey": "{}",
                "httpPort": {HTTP_PORT}, "tlsPort": {TLS_PORT},
                "ocspResponderURL": "{}", "externalAccountBindingRequired": false,
                "domainBlocklist": ["blocked.test"],
                "retryAfter": {{"authz": 1, "order": 1}},
                "keyAlgorithm": "{}",
                "profiles": {{"default": {{"description": "test", "validityPeriod": {}}}}}
            }}}}"#,
            cert.display(),
            key.display(),
            opts.ocsp_url,
            // The OCSP test signs answers with pebble's intermediate key, which pebble hands
            // out only for RSA.
            if opts.ocsp_url.is_empty() { "ecdsa" } else { "rsa" },
            opts.validity
        );
        let config = dir.write("pebble.json", config);
        let dns = Proc::spawn(Command::new(chall).args([
            "-dnsserver",
            &format!("127.0.0.1:{DNS_PORT}"),
            "-management",
            &format!("127.0.0.1:{CHALL_MGMT_PORT}"),
            "-defaultIPv4",
            "127.0.0.1",
            "-defaultIPv6",
            "",
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-doh",
            "",
        ]));
        wait_port(CHALL_MGMT_PORT, "pebble-challtestsrv");
        let pebble = Proc::spawn(
            Command::new(pebble)
                .args(["-config", config.to_str().unwrap(), "-dnsserver", &format!("127.0.0.1:{}", opts.dns_port)])
                .env("PEBBLE_VA_NOSLEEP", "1")
                // Every order validates its names (pebble reuses half of the valid
                // authorizations by default, which made renewals differ from run to run).
                .env("PEBBLE_AUTHZREUSE", "0"),
        );
        wait_port(ACME_PORT, "pebble");
        wait_port(MGMT_PORT, "pebble management");
        let (ok, root, err) =
            curl(&["--cacert", api_ca.to_str().unwrap(), &format!("https://127.0.0.1:{MGMT_PORT}/roots/0")]);
        assert!(ok && root.contains("BEGIN CERTIFICATE"), "pebble root: {err}");
        let root = dir.write("pebble-root.pem", root);
        Some(Pebble { dir, pebble, _dns: dns, api_ca, root, _serial: serial })
    }

    /// Resolves `host` to `ip` instead of 127.0.0.1 for pebble.
    fn resolve(&self, host: &str, ip: &str) {
        let body = format!(r#"{{"host":"{host}","addresses":["{ip}"]}}"#);
        let (ok, _, err) = curl(&["-d", &body, &format!("http://127.0.0.1:{CHALL_MGMT_PORT}/add-a")]);
        assert!(ok, "{err}");
    }

    /// Orders pebble created so far.
    fn orders(&self) -> usize {
        self.pebble.count("Added order")
    }

    /// Accounts pebble created so far.
    fn accounts(&self) -> usize {
        self.pebble.count("accounts in memory")
    }

    /// A selvedge config: `listeners` and `[acme]` extra lines, one vhost per `hosts` entry
    /// with `tls = "acme"`, storage `storage`.
    fn config(&self, name: &str, listeners: &str, acme: &str, hosts: &[&[&str]], storage: &Path) -> PathBuf {
        let site = self.dir.write("site/index.html", "acme site\n");
        let mut cfg = format!(
            "{listeners}\n[acme]\ndirectory = \"https://127.0.0.1:{ACME_PORT}/dir\"\nca_roots = \"{}\"\n\
             storage = \"{}\"\nemail = \"ops@selvedge.test\"\nretry_min = \"2s\"\n{acme}\n",
            self.api_ca.display(),
            storage.display()
        );
        for h in hosts {
            let list: Vec<String> = h.iter().map(|n| format!("\"{n}\"")).collect();
            cfg.push_str(&format!(
                "[[vhost]]\nhosts = [{}]\ntls = \"acme\"\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
                list.join(", "),
                site.parent().unwrap().display()
            ));
        }
        self.dir.write(name, cfg)
    }

    /// GET https://NAME:TLS_PORT/ checked against pebble's root: (ok, body, curl's stderr).
    fn get(&self, name: &str) -> (bool, String, String) {
        curl(&[
            "--cacert",
            self.root.to_str().unwrap(),
            "--resolve",
            &format!("{name}:{TLS_PORT}:127.0.0.1"),
            &format!("https://{name}:{TLS_PORT}/"),
        ])
    }
}

fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl").args(["-sS", "--max-time", "10"]).args(args).output().expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tls_listener(port: u16) -> String {
    format!("[[listen]]\nport = {port}\ntls = {{}}\n")
}

fn start_selvedge(cfg: &Path) -> Srv {
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

fn log_count(srv: &Srv, pat: &str) -> usize {
    srv.stderr.lock().unwrap().iter().filter(|l| l.contains(pat)).count()
}

fn log_text(srv: &Srv) -> String {
    srv.stderr.lock().unwrap().join("\n")
}

fn wait_log(srv: &Srv, pat: &str, n: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while log_count(srv, pat) < n {
        assert!(Instant::now() < deadline, "no {n}x {pat:?} in the log:\n{}", log_text(srv));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TLS connection to TLS_PORT for `name`, verified against `root`.
fn tls_connect(name: &str, root: &Path) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in selvedge_server::acme::config::load_roots(root)? {
        roots.add(c).map_err(|e| e.to_string())?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name.to_string().try_into().unwrap()).unwrap();
    let mut sock = TcpStream::connect(("127.0.0.1", TLS_PORT)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    Ok(rustls::StreamOwned::new(conn, sock))
}

/// The serial (hex) of the certificate a connection was given.
fn peer_serial(s: &rustls::StreamOwned<rustls::ClientConnection, TcpStream>) -> String {
    let der = &s.conn.peer_certificates().unwrap()[0];
    selvedge_server::acme::cert::CertInfo::parse(der).unwrap().serial
}

/// One keep-alive GET on an open connection: the status.
fn get_on(s: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>, name: &str) -> u16 {
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {name}\r\n\r\n").as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(r) = parse(&buf, true) {
            let len: usize = r.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            if r.body.len() >= len {
                return r.status;
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn find(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(find(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out
}

#[test]
fn tls_alpn01_certificate_is_obtained_and_served() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config(
        "alpn.toml",
        &tls_listener(TLS_PORT),
        "challenge = \"tls-alpn-01\"",
        &[&["alpn.test", "www.alpn.test"]],
        &storage,
    );
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for alpn.test, www.alpn.test", 1, 60);
    for name in ["alpn.test", "www.alpn.test"] {
        let (ok, body, err) = pb.get(name);
        assert!(ok, "{name}: {err}\n{}", log_text(&srv));
        assert_eq!(body, "acme site\n");
    }
    // The chain is checked: the test CA of pebble's API does not verify it.
    let (ok, _, err) = curl(&[
        "--cacert",
        pb.api_ca.to_str().unwrap(),
        "--resolve",
        &format!("alpn.test:{TLS_PORT}:127.0.0.1"),
        &format!("https://alpn.test:{TLS_PORT}/"),
    ]);
    assert!(!ok && err.contains("certificate"), "{err}");
    // A name without a certificate (no default on this listener) fails with an alert.
    let (ok, _, err) = curl(&[
        "-k",
        "--resolve",
        &format!("other.test:{TLS_PORT}:127.0.0.1"),
        &format!("https://other.test:{TLS_PORT}/"),
    ]);
    assert!(!ok && err.contains("alert"), "{err}");
    // One order per attempt: an attempt that failed (pebble rejects good nonces on purpose)
    // said so, and the next one ordered again.
    let failed = log_count(&srv, "could not obtain a certificate");
    assert_eq!((pb.orders(), pb.accounts()), (1 + failed, 1), "{}", pb.pebble.text());
    // Storage: private directories and files, nothing half-written left.
    assert_eq!(mode(&storage), 0o700);
    let files = find(&storage, ".pem");
    assert!(!files.is_empty());
    for f in files.iter().chain(&find(&storage, ".json")) {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    assert!(find(&storage, ".tmp").is_empty());
    // Challenge answers are withdrawn after validation.
    assert!(find(&storage.join("challenges"), "").is_empty(), "{:?}", find(&storage.join("challenges"), ""));
    assert_eq!(srv.stop(), Some(0));
}

#[test]
fn http01_certificate_is_obtained_and_served_before_the_redirect() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("acme");
    let listeners = format!("{}[[listen]]\nport = {HTTP_PORT}\nredirect_https = true\n", tls_listener(TLS_PORT));
    let cfg = pb.config("http01.toml", &listeners, "challenge = \"http-01\"", &[&["http.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for http.test", 1, 60);
    let (ok, body, err) = pb.get("http.test");
    assert!(ok, "{err}\n{}", log_text(&srv));
    assert_eq!(body, "acme site\n");
    // The port-80 listener still redirects everything else, and answers unknown tokens 404.
    let r = request(
        ([127, 0, 0, 1], HTTP_PORT).into(),
        "GET /a?b HTTP/1.1\r\nHost: http.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some(&*format!("https://http.test:{TLS_PORT}/a?b")));
    let r = request(
        ([127, 0, 0, 1], HTTP_PORT).into(),
        "GET /.well-known/acme-challenge/nope HTTP/1.1\r\nHost: http.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    let failed = log_count(&srv, "could not obtain a certificate");
    assert_eq!((pb.orders(), pb.accounts()), (1 + failed, 1), "{}", pb.pebble.text());
}

#[test]
fn forced_renewal_installs_a_new_certificate_and_keeps_connections() {
    // 20-second certificates renewed 8 seconds before they expire.
    let Some(pb) = Pebble::start(PebbleOpts { validity: 20, ..Default::default() }) else { return };
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config("renew.toml", &tls_listener(TLS_PORT), "renew_before = \"8s\"", &[&["renew.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for renew.test", 1, 60);
    let mut old = tls_connect("renew.test", &pb.root).unwrap();
    let first = peer_serial(&old);
    assert_eq!(get_on(&mut old, "renew.test"), 200);
    // A renewal comes about 12 seconds after issuance; new connections get it.
    let deadline = Instant::now() + Duration::from_secs(40);
    let second = loop {
        assert!(Instant::now() < deadline, "no renewal:\n{}", log_text(&srv));
        std::thread::sleep(Duration::from_millis(250));
        // A handshake may fail while the first certificate has expired and its renewal is
        // still being retried: the loop goes on until the deadline.
        let Ok(s) = tls_connect("renew.test", &pb.root) else { continue };
        let serial = peer_serial(&s);
        if serial != first {
            break serial;
        }
    };
    assert!(log_count(&srv, "renewing a certificate for renew.test") >= 1, "{}", log_text(&srv));
    // The connection opened before the renewal is still served, with its certificate.
    assert_eq!(get_on(&mut old, "renew.test"), 200);
    assert_eq!(peer_serial(&old), first);
    let (ok, _, err) = pb.get("renew.test");
    assert!(ok, "{err}");
    assert_ne!(first, second);
    assert!(pb.orders() >= 2);
    assert_eq!(pb.accounts(), 1, "a renewal reuses the account");
}

#[test]
fn two_instances_sharing_storage_order_one_certificate() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("shared");
    // Both bind the validation ports (`reuse_port`: SO_REUSEPORT, shared on purpose): pebble
    // reaches either, and the one that did not order answers from the storage. Each also
    // has a port of its own.
    let listeners = format!(
        "[[listen]]\nport = {TLS_PORT}\ntls = {{}}\nreuse_port = true\n{}[[listen]]\nport = {HTTP_PORT}\nreuse_port = true\n",
        tls_listener(0)
    );
    let cfg = pb.config(
        "shared.toml",
        &listeners,
        "challenge = \"http-01\"",
        &[&["shared.test", "www.shared.test"]],
        &storage,
    );
    let a = Proc::spawn(Command::new(BIN).args(["--config", cfg.to_str().unwrap()]));
    let b = Proc::spawn(Command::new(BIN).args(["--config", cfg.to_str().unwrap()]));
    let own_port = |p: &Proc| -> Option<u16> {
        let text = p.text();
        text.split_whitespace()
            .filter_map(|w| w.strip_prefix("https://127.0.0.1:")?.trim_end_matches('/').parse::<u16>().ok())
            .find(|port| *port != TLS_PORT)
    };
    let get = |p: &Proc| {
        let port = own_port(p)?;
        let (ok, body, err) = curl(&[
            "--cacert",
            pb.root.to_str().unwrap(),
            "--resolve",
            &format!("www.shared.test:{port}:127.0.0.1"),
            &format!("https://www.shared.test:{port}/"),
        ]);
        Some((ok && body == "acme site\n", err))
    };
    // Each instance ends up serving the certificate on its own port.
    let deadline = Instant::now() + Duration::from_secs(60);
    while ![&a, &b].iter().all(|p| get(p).is_some_and(|(ok, _)| ok)) {
        assert!(Instant::now() < deadline, "A:\n{}\nB:\n{}\n{:?} {:?}", a.text(), b.text(), get(&a), get(&b));
        std::thread::sleep(Duration::from_millis(200));
    }
    let obtained = a.count("obtained a certificate") + b.count("obtained a certificate");
    assert_eq!(obtained, 1, "A:\n{}\nB:\n{}", a.text(), b.text());
    // One order per attempt, and one attempt at a time between the two: every order but
    // the one that succeeded belongs to an attempt that failed and said so (pebble rejects
    // good nonces on purpose, and three rejections of one request fail an attempt).
    let failed = a.count("could not obtain a certificate") + b.count("could not obtain a certificate");
    assert_eq!(pb.orders(), 1 + failed, "{}\nA:\n{}\nB:\n{}", pb.pebble.text(), a.text(), b.text());
    assert_eq!(pb.accounts(), 1, "{}", pb.pebble.text());
}

/// Three instances of a `[fleet]`, each with a storage directory of its own: the account,
/// the lock, the challenge answers and the certificate go through one `redis-server`; a
/// lock left by a dead holder holds them until it expires; then one instance orders
/// (pebble rejects good nonces now and then, as Let's Encrypt may), and the other two serve
/// the certificate within two seconds of it being stored (the announcement, not a poll).
#[test]
fn three_fleet_instances_order_once_through_redis() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    if !have("redis-server") {
        common::missing_tool("redis-server", "three_fleet_instances_order_once_through_redis");
        return;
    }
    let redis_port = free_port();
    let _redis = Proc::spawn(Command::new("redis-server").args([
        "--port",
        &redis_port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]));
    wait_port(redis_port, "redis-server");
    // A holder that died with the certificate's lock: it blocks the others until its
    // expiry (3 s here; a live holder extends its 60 s every 20 s), then one takes it over.
    let mut r = TcpStream::connect(("127.0.0.1", redis_port)).unwrap();
    let key = format!("selvedge:acme:127.0.0.1-{ACME_PORT}-dir:lock:fleet.test");
    write!(r, "*5\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$4\r\ndead\r\n$2\r\nPX\r\n$4\r\n3000\r\n", key.len()).unwrap();
    let mut ok = [0u8; 5];
    r.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let started = Instant::now();
    let listeners = format!(
        "[[listen]]\nport = {TLS_PORT}\ntls = {{}}\nreuse_port = true\n{}[[listen]]\nport = {HTTP_PORT}\nreuse_port = true\n",
        tls_listener(0)
    );
    let instances: Vec<Proc> = (1..=3)
        .map(|i| {
            let storage = pb.dir.path().join(format!("own-{i}"));
            let cfg = pb.config(
                &format!("fleet-{i}.toml"),
                &listeners,
                "challenge = \"http-01\"",
                &[&["fleet.test", "www.fleet.test"]],
                &storage,
            );
            let mut text = std::fs::read_to_string(&cfg).unwrap();
            text.push_str(&format!("[fleet]\nredis = \"redis://127.0.0.1:{redis_port}/0\"\ninstance = \"acme-{i}\"\n"));
            std::fs::write(&cfg, text).unwrap();
            Proc::spawn(Command::new(BIN).args(["--config", cfg.to_str().unwrap()]))
        })
        .collect();
    let own_port = |p: &Proc| -> Option<u16> {
        p.text()
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("https://127.0.0.1:")?.trim_end_matches('/').parse::<u16>().ok())
            .find(|port| *port != TLS_PORT)
    };
    let serves = |p: &Proc| {
        let Some(port) = own_port(p) else { return false };
        let (ok, body, _) = curl(&[
            "--cacert",
            pb.root.to_str().unwrap(),
            "--resolve",
            &format!("www.fleet.test:{port}:127.0.0.1"),
            &format!("https://www.fleet.test:{port}/"),
        ]);
        ok && body == "acme site\n"
    };
    let texts = || instances.iter().map(Proc::text).collect::<Vec<_>>().join("\n-----\n");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let serving = instances.iter().filter(|p| serves(p)).count();
        if serving == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "{serving} of 3 serve it:\n{}", texts());
        std::thread::sleep(Duration::from_millis(100));
    }
    // From the orderer's line to the last of the others' (as the lines were read).
    let ordered = instances.iter().find_map(|p| p.first_at("obtained a certificate")).expect("the orderer's line");
    let others: Vec<Instant> = instances.iter().filter_map(|p| p.first_at("another instance stored")).collect();
    assert_eq!(others.len(), 2, "{}", texts());
    let spread = others.iter().map(|t| t.saturating_duration_since(ordered)).max().unwrap_or_default();
    eprintln!("the other two served the certificate {spread:?} after the orderer obtained it");
    assert!(spread < Duration::from_secs(2), "the others took {spread:?}:\n{}", texts());
    let obtained: usize = instances.iter().map(|p| p.count("obtained a certificate")).sum();
    assert_eq!(obtained, 1, "{}", texts());
    let waited = ordered.saturating_duration_since(started);
    assert!(waited > Duration::from_millis(2_500), "the dead holder's lock was not waited for: {waited:?}");
    assert!(instances.iter().all(|p| p.count("another instance is obtaining") > 0), "{}", texts());
    let failed: usize = instances.iter().map(|p| p.count("could not obtain a certificate")).sum();
    assert_eq!(pb.orders(), 1 + failed, "{}\n{}", pb.pebble.text(), texts());
    assert_eq!(pb.accounts(), 1, "{}", pb.pebble.text());
    // Nothing of it in the directories: it is all in Redis.
    for i in 1..=3 {
        let own = pb.dir.path().join(format!("own-{i}"));
        assert!(find(&own, ".pem").is_empty() && find(&own, ".json").is_empty(), "{:?}", find(&own, ""));
    }
}

#[test]
fn refused_and_failed_names_leave_the_others_served() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    // unreachable.test resolves where nothing listens: its validation fails.
    pb.resolve("unreachable.test", "127.0.0.2");
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config(
        "refused.toml",
        &tls_listener(TLS_PORT),
        "retry_max = \"4s\"",
        &[&["blocked.test"], &["good.test"], &["unreachable.test"]],
        &storage,
    );
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for good.test", 1, 60);
    wait_log(&srv, "error: could not obtain a certificate for blocked.test (attempt 1)", 1, 60);
    wait_log(&srv, "error: could not obtain a certificate for unreachable.test (attempt 1)", 1, 60);
    let text = log_text(&srv);
    assert!(text.contains("rejectedIdentifier"), "{text}");
    assert!(text.contains("unreachable.test: API error"), "{text}");
    let (ok, _, err) = pb.get("good.test");
    assert!(ok, "{err}");
    // The refused names have no certificate: their handshakes fail with an alert.
    for name in ["blocked.test", "unreachable.test"] {
        let (ok, _, err) =
            curl(&["-k", "--resolve", &format!("{name}:{TLS_PORT}:127.0.0.1"), &format!("https://{name}:{TLS_PORT}/")]);
        assert!(!ok && err.contains("alert"), "{name}: {err}");
    }
    // Retried with backoff (2s, then 4s), and the attempts are shared through the storage.
    wait_log(&srv, "could not obtain a certificate for blocked.test (attempt 2)", 1, 30);
    assert!(text.contains("next attempt in 2s"), "{text}");
    let retry = std::fs::read_to_string(find(&storage, "blocked.test.retry").pop().expect("retry state")).unwrap();
    assert!(retry.contains("\"failures\""), "{retry}");
    let (ok, _, _) = pb.get("good.test");
    assert!(ok);
    eprintln!("{}", log_text(&srv));
}

#[test]
fn restart_reuses_the_account_and_the_certificate() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config("restart.toml", &tls_listener(TLS_PORT), "", &[&["restart.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for restart.test", 1, 60);
    let first = peer_serial(&tls_connect("restart.test", &pb.root).unwrap());
    let failed = log_count(&srv, "could not obtain a certificate");
    assert_eq!(srv.stop(), Some(0));
    let (orders, accounts) = (pb.orders(), pb.accounts());
    assert_eq!((orders, accounts), (1 + failed, 1), "{}", pb.pebble.text());
    let srv = start_selvedge(&cfg);
    // Served at once from the storage.
    assert!(log_count(&srv, "serving the stored certificate for restart.test") == 1, "{}", log_text(&srv));
    assert_eq!(peer_serial(&tls_connect("restart.test", &pb.root).unwrap()), first);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!((pb.orders(), pb.accounts()), (orders, accounts), "{}", pb.pebble.text());
    assert_eq!(log_count(&srv, "obtaining") + log_count(&srv, "renewing"), 0, "{}", log_text(&srv));
}

#[test]
fn sighup_obtains_certificates_for_new_hosts_and_drops_removed_ones() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config("reload.toml", &tls_listener(TLS_PORT), "", &[&["first.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for first.test", 1, 60);
    pb.config("reload.toml", &tls_listener(TLS_PORT), "", &[&["second.test"]], &storage);
    srv.signal("HUP");
    wait_log(&srv, "obtained a certificate for second.test", 1, 60);
    let (ok, _, err) = pb.get("second.test");
    assert!(ok, "{err}");
    let (ok, _, err) = pb.get("first.test");
    assert!(!ok && err.contains("alert"), "a removed host is still served: {err}");
    assert_eq!(pb.accounts(), 1);
}

#[test]
fn renewal_information_from_the_ca_renews_early() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config("ari.toml", &tls_listener(TLS_PORT), "", &[&["ari.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for ari.test", 1, 60);
    assert_eq!(srv.stop(), Some(0));
    // The CA now says: renew this certificate (a window that has passed, as after a
    // revocation). Told at the next start, which asks for the window.
    let pem = std::fs::read_to_string(find(&storage, "ari.test.pem").pop().unwrap()).unwrap();
    let leaf = &pem[..pem.find("-----END CERTIFICATE-----").unwrap() + 25];
    let ari = r#"{"suggestedWindow":{"start":"2020-01-01T00:00:00Z","end":"2020-01-02T00:00:00Z"}}"#;
    let body = format!(r#"{{"Certificate":{},"ARIResponse":{}}}"#, json_str(leaf), json_str(ari));
    let (ok, _, err) = curl(&[
        "--cacert",
        pb.api_ca.to_str().unwrap(),
        "-d",
        &body,
        &format!("https://127.0.0.1:{MGMT_PORT}/set-renewal-info/"),
    ]);
    assert!(ok, "{err}");
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for ari.test", 1, 60);
    // One renewal, tried again after each attempt that failed and said so.
    let failed = log_count(&srv, "could not obtain a certificate");
    assert_eq!(log_count(&srv, "renewing a certificate for ari.test"), 1 + failed, "{}", log_text(&srv));
    // The new order says which certificate it replaces.
    let replacing = pb.pebble.count("is a replacement of");
    assert!((1..=1 + failed).contains(&replacing), "{}", pb.pebble.text());
    assert_eq!(pb.accounts(), 1);
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn check_validates_acme_settings() {
    let dir = TempDir::new("acme-check");
    dir.write("site/index.html", "x");
    let check = |acme: &str, vhost_tls: &str, listeners: &str| {
        let cfg = dir.write(
            "c.toml",
            format!(
                "{listeners}\n{acme}\n[[vhost]]\nhosts = [\"example.com\"]\ntls = {vhost_tls}\n\
                 [[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
            ),
        );
        let out = Command::new(BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let tls = "[[listen]]\nport = 8443\ntls = {}\n";
    let good = format!(
        "[acme]\nstorage = \"{}\"\nchallenge = \"tls-alpn-01\"\nrenew_before = \"30d\"",
        dir.path().join("acme").display()
    );
    let (code, out) = check(&good, "\"acme\"", tls);
    assert_eq!(code, Some(0), "{out}");
    // Checking creates nothing.
    assert!(!dir.path().join("acme").exists());
    // (the [acme] lines, the vhost's tls, the listeners, the message, the line it points at)
    for (acme, vhost_tls, listeners, want, at) in [
        ("[acme]\nchallenge = \"dns-02\"", "\"acme\"", tls, "\"dns-01\"", "challenge"),
        ("[acme]\nchallenge = \"dns-01\"", "\"acme\"", tls, "needs [acme.dns]", "challenge"),
        ("[acme]\n[acme.dns]\nprovider = \"exec\"", "\"acme\"", tls, "dns-01\" only", ""),
        (
            "[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"route53\"",
            "\"acme\"",
            tls,
            "\"rfc2136\" or",
            "provider",
        ),
        ("[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"rfc2136\"", "\"acme\"", tls, "needs `server`", ""),
        (
            "[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"rfc2136\"\nserver = \"ns1.example.com\"",
            "\"acme\"",
            tls,
            "TSIG key",
            "",
        ),
        (
            "[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"rfc2136\"\nserver = \"ns1.example.com\"\n\
             key_name = \"k\"\nkey_secret = \"not base64!\"",
            "\"acme\"",
            tls,
            "not base64",
            "key_secret",
        ),
        (
            "[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"rfc2136\"\nserver = \"ns1.example.com\"\n\
             key_name = \"k\"\nkey_algorithm = \"hmac-md5\"\nkey_secret = \"c2VsdmVkZ2Ugc2VsdmVkZ2Ugc2VsdmVkZ2U=\"",
            "\"acme\"",
            tls,
            "hmac-sha256, hmac-sha384, hmac-sha512",
            "key_algorithm",
        ),
        (
            "[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"rfc2136\"\nserver = \"ns1:x\"",
            "\"acme\"",
            tls,
            "host:port",
            "server",
        ),
        (
            "[acme]\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"exec\"\ncommand = [\"hook\"]",
            "\"acme\"",
            tls,
            "absolute path",
            "",
        ),
        ("[acme]\nrenew_before = \"soon\"", "\"acme\"", tls, "invalid duration", "renew_before"),
        ("[acme]\ndirectory = \"http://ca.test/dir\"", "\"acme\"", tls, "https://", "directory"),
        ("[acme]\nca_roots = \"missing.pem\"", "\"acme\"", tls, "missing.pem", "ca_roots"),
        ("[acme]\nemail = \"ops\"", "\"acme\"", tls, "e-mail", "email"),
        ("[acme]\nstorage = \"/dev/null/x\"", "\"acme\"", tls, "Not a directory", "storage"),
        ("[acme]\ncolour = \"blue\"", "\"acme\"", tls, "unknown field", "colour"),
        ("", "\"acme\"", "", "needs a TLS listener", ""),
        ("[acme]\nchallenge = \"http-01\"", "\"acme\"", tls, "cleartext listener", ""),
        ("", "\"acme\"", "[[listen]]\nport = 8443\ntls = {}\non_demand = { rate = 5 }\n", "needs `ask`", "on_demand"),
        (
            "",
            "\"acme\"",
            "[[listen]]\nport = 8443\ntls = {}\non_demand = { ask = \"ftp://a/\" }\n",
            "http:// or",
            "on_demand",
        ),
        (
            "",
            "\"acme\"",
            "[[listen]]\nport = 8443\ntls = {}\non_demand = { ask = \"http://a/\", rate = 0 }\n",
            "at least 1",
            "on_demand",
        ),
        (
            "",
            "\"acme\"",
            "[[listen]]\nport = 8443\ntls = {}\non_demand = { ask = \"http://a/c#f\" }\n",
            "fragment",
            "on_demand",
        ),
        (
            "",
            "\"acme\"",
            "[[listen]]\nport = 8443\non_demand = { ask = \"http://a/c\" }\n",
            "for TLS listeners",
            "on_demand",
        ),
        ("", "\"automatic\"", tls, "\"acme\" or", "automatic"),
    ] {
        let (code, out) = check(acme, vhost_tls, listeners);
        assert_eq!(code, Some(2), "{acme}: {out}");
        assert!(out.contains(want), "{acme}: {out}");
        if !at.is_empty() {
            let text = std::fs::read_to_string(dir.path().join("c.toml")).unwrap();
            let line = text.lines().position(|l| l.starts_with(at) || l.contains(at)).unwrap() + 1;
            assert!(out.contains(&format!("c.toml:{line}:")), "{acme}: line {line}: {out}");
        }
    }
    // Wildcards need DNS-01.
    let wild = |acme: &str| {
        let cfg = dir.write(
            "w.toml",
            format!(
                "{tls}{acme}\n[[vhost]]\nhosts = [\"*.example.com\"]\ntls = \"acme\"\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
            ),
        );
        let out = Command::new(BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, out) = wild("");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("*.example.com: a wildcard certificate needs challenge = \"dns-01\""), "{out}");
    let key = dir.write(
        "k.key",
        "key \"selvedge\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VsdmVkZ2Ugc2VsdmVkZ2Ugc2VsdmVkZ2U=\";\n};\n",
    );
    let (code, out) = wild(&format!(
        "[acme]\nstorage = \"{}\"\nchallenge = \"dns-01\"\n[acme.dns]\nprovider = \"rfc2136\"\nserver = \"127.0.0.1:53\"\nkey_file = \"{}\"",
        dir.path().join("acme").display(),
        key.display()
    ));
    assert_eq!(code, Some(0), "{out}");
}

/// BIND 9 (Debian's `bind9`) serving the zone `wild.test` on BIND_PORT, authoritative only,
/// taking TXT updates signed with the TSIG key `selvedge` (written by `tsig-keygen`).
struct Bind {
    proc: Proc,
    key_file: PathBuf,
}

impl Bind {
    /// `None` (a skip) when BIND is not installed outside CI.
    fn start(dir: &TempDir) -> Option<Bind> {
        let named = ["/usr/sbin/named", "/usr/bin/named"].into_iter().find(|p| Path::new(p).exists());
        let keygen = ["/usr/sbin/tsig-keygen", "/usr/bin/tsig-keygen"].into_iter().find(|p| Path::new(p).exists());
        let (Some(named), Some(keygen)) = (named, keygen) else {
            common::missing_tool("named and tsig-keygen (bind9)", "acme dns-01");
            return None;
        };
        let bind = dir.path().join("bind");
        std::fs::create_dir_all(&bind).unwrap();
        let key = Command::new(keygen).args(["-a", "hmac-sha256", "selvedge"]).output().unwrap();
        assert!(key.status.success());
        let key_file = dir.write("bind/selvedge.key", &key.stdout);
        dir.write(
            "bind/wild.test.zone",
            "$TTL 60\n@ IN SOA ns.wild.test. hostmaster.wild.test. 1 60 60 600 5\n@ IN NS ns.wild.test.\n\
             ns IN A 127.0.0.1\n",
        );
        let b = bind.display();
        let conf = dir.write(
            "bind/named.conf",
            format!(
                "options {{ directory \"{b}\"; listen-on port {BIND_PORT} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }};\n\
                 recursion no; pid-file \"{b}/named.pid\"; session-keyfile \"{b}/session.key\"; notify no; }};\n\
                 controls {{ }};\ninclude \"{}\";\n\
                 zone \"wild.test\" {{ type primary; file \"{b}/wild.test.zone\";\n\
                 update-policy {{ grant selvedge zonesub TXT; }}; }};\n",
                key_file.display()
            ),
        );
        let proc = Proc::spawn(Command::new(named).args(["-g", "-4", "-c", conf.to_str().unwrap()]));
        eventually(20, "BIND running", || proc.count("running") > 0);
        Some(Bind { proc, key_file })
    }

    /// The TXT values at `name`, asked of BIND with `dig`.
    fn txt(&self, name: &str) -> Vec<String> {
        let out = Command::new("dig")
            .args(["+short", "+norecurse", "@127.0.0.1", "-p", &BIND_PORT.to_string(), name, "TXT"])
            .output()
            .expect("dig");
        String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim_matches('"').to_string()).collect()
    }
}

/// TXT records the server's log says it wrote, over all its DNS-01 validations.
fn dns01_records(srv: &Srv) -> usize {
    let lines = srv.stderr.lock().unwrap().clone();
    lines.iter().filter_map(|l| l.split_once("dns-01: ")?.1.split_once(" TXT record(s)")?.0.parse::<usize>().ok()).sum()
}

fn dns01_config(provider: &str) -> String {
    format!(
        "challenge = \"dns-01\"\nrenew_before = \"8s\"\n[acme.dns]\n{provider}\ncheck = [\"127.0.0.1:{BIND_PORT}\"]\n\
         propagation_timeout = \"20s\"\n"
    )
}

#[test]
fn dns01_through_rfc2136_gets_a_wildcard_certificate_renews_it_and_removes_its_records() {
    // 20-second certificates renewed 8 seconds before they expire: one renewal in the test.
    let Some(pb) = Pebble::start(PebbleOpts { validity: 20, dns_port: BIND_PORT, ..Default::default() }) else {
        return;
    };
    let Some(bind) = Bind::start(&pb.dir) else { return };
    let storage = pb.dir.path().join("acme");
    let provider = format!(
        "provider = \"rfc2136\"\nserver = \"127.0.0.1:{BIND_PORT}\"\nkey_file = \"{}\"",
        bind.key_file.display()
    );
    let cfg = pb.config(
        "dns.toml",
        &tls_listener(TLS_PORT),
        &dns01_config(&provider),
        &[&["*.wild.test", "wild.test"]],
        &storage,
    );
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for *.wild.test, wild.test", 1, 60);
    // Both records (the wildcard's and the base name's share one name) were written, signed,
    // and seen on the checked server before the CA was told.
    assert_eq!(log_count(&srv, "dns-01: 2 TXT record(s) at _acme-challenge.wild.test, _acme-challenge.wild.test"), 1);
    let first = peer_serial(&tls_connect("a.wild.test", &pb.root).unwrap());
    for name in ["a.wild.test", "b.wild.test", "wild.test"] {
        let (ok, body, err) = pb.get(name);
        assert!(ok && body == "acme site\n", "{name}: {err}");
    }
    // A wildcard covers one label only: no certificate for a deeper name.
    assert!(!pb.get("x.a.wild.test").0);
    // Stored under a file name without the glob character.
    assert_eq!(find(&storage, "wildcard_.wild.test.pem").len(), 1, "{:?}", find(&storage, ".pem"));
    // The renewal comes about 12 s after issuance, by DNS-01 again.
    wait_log(&srv, "obtained a certificate for *.wild.test, wild.test", 2, 60);
    assert_ne!(peer_serial(&tls_connect("b.wild.test", &pb.root).unwrap()), first);
    // One record per authorization pebble made. Pebble 2.10 reuses a valid authorization
    // in about one order in a hundred even with PEBBLE_AUTHZREUSE=0 (its test is
    // `rand.Intn(100) > percent`), so the renewal writes a record for each name pebble
    // asked to validate again: usually both, sometimes one.
    let records = dns01_records(&srv);
    let authorizations = pb.pebble.count("authorizations in the db");
    assert_eq!(records, authorizations, "{}\n{}", log_text(&srv), pb.pebble.text());
    assert!(log_count(&srv, "dns-01: ") >= 2 || authorizations == 2, "{}", log_text(&srv));
    // The records are removed once the order is validated.
    eventually(10, "the TXT records removed", || bind.txt("_acme-challenge.wild.test").is_empty());
    assert!(bind.proc.count("adding an RR at '_acme-challenge.wild.test' TXT") >= records, "{}", bind.proc.text());
    assert!(bind.proc.count("deleting an RR at _acme-challenge.wild.test TXT") >= records, "{}", bind.proc.text());
    assert_eq!(log_count(&srv, "error"), 0, "{}", log_text(&srv));
}

#[test]
fn dns01_updates_refused_by_the_server_fail_the_order_with_its_answer() {
    let Some(pb) = Pebble::start(PebbleOpts { dns_port: BIND_PORT, ..Default::default() }) else { return };
    let Some(_bind) = Bind::start(&pb.dir) else { return };
    let storage = pb.dir.path().join("acme");
    // A key BIND does not know: BIND answers BADKEY unsigned, the order fails at once, and
    // the log names the key.
    let provider = format!(
        "provider = \"rfc2136\"\nserver = \"127.0.0.1:{BIND_PORT}\"\nzone = \"wild.test\"\nkey_name = \"selvedge\"\n\
         key_secret = \"c2VsdmVkZ2Ugc2VsdmVkZ2Ugc2VsdmVkZ2U=\""
    );
    let cfg = pb.config("bad.toml", &tls_listener(TLS_PORT), &dns01_config(&provider), &[&["*.wild.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "could not obtain a certificate for *.wild.test", 1, 60);
    let text = log_text(&srv);
    assert!(text.contains("adding TXT _acme-challenge.wild.test: no verifiable answer"), "{text}");
    assert!(text.contains("is TSIG key \"selvedge\" (hmac-sha256) the one the server has?"), "{text}");
    assert_eq!(pb.orders(), 1);
    assert!(!pb.get("a.wild.test").0);
}

#[test]
fn dns01_through_a_command_gets_the_certificate_and_cleans_up() {
    let Some(pb) = Pebble::start(PebbleOpts { dns_port: BIND_PORT, ..Default::default() }) else { return };
    let Some(bind) = Bind::start(&pb.dir) else { return };
    let storage = pb.dir.path().join("acme");
    // The hook: nsupdate with the key, and a line per call in calls.log.
    let calls = pb.dir.path().join("calls.log");
    let hook = pb.dir.write(
        "hook.sh",
        format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\ncase \"$1\" in present) op=add;; cleanup) op=delete;; *) exit 2;; esac\n\
             printf 'server 127.0.0.1 {BIND_PORT}\\nupdate %s %s 60 TXT \"%s\"\\nsend\\n' \"$op\" \"$2\" \"$3\" | nsupdate -k {key}\n",
            calls = calls.display(),
            key = bind.key_file.display()
        ),
    );
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let provider = format!("provider = \"exec\"\ncommand = [\"{}\"]", hook.display());
    let cfg =
        pb.config("exec.toml", &tls_listener(TLS_PORT), &dns01_config(&provider), &[&["exec.wild.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for exec.wild.test", 1, 60);
    let (ok, _, err) = pb.get("exec.wild.test");
    assert!(ok, "{err}");
    eventually(10, "the cleanup call", || std::fs::read_to_string(&calls).is_ok_and(|c| c.contains("cleanup")));
    let log = std::fs::read_to_string(&calls).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].starts_with("present _acme-challenge.exec.wild.test. "), "{log}");
    assert_eq!(lines[1], lines[0].replacen("present", "cleanup", 1), "{log}");
    eventually(10, "the TXT record removed", || bind.txt("_acme-challenge.exec.wild.test").is_empty());
}

/// A test `ask` service for on-demand TLS: answers `GET /check?domain=NAME` with 200 when
/// `allow(NAME)`, else 403, and records every name asked about.
struct AskService {
    port: u16,
    asked: Arc<Mutex<Vec<String>>>,
}

impl AskService {
    fn start(allow: fn(&str) -> bool) -> AskService {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&b[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let target = text.split(' ').nth(1).unwrap_or("");
                    let name = target.split_once("domain=").map_or("", |(_, n)| n).to_string();
                    let ok = target.starts_with("/check?") && allow(&name);
                    seen.lock().unwrap().push(name);
                    let status = if ok { "200 OK" } else { "403 Forbidden" };
                    let _ = conn.write_all(
                        format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes(),
                    );
                });
            }
        });
        AskService { port, asked }
    }

    fn count(&self, name: &str) -> usize {
        self.asked.lock().unwrap().iter().filter(|n| *n == name).count()
    }
}

#[test]
fn on_demand_names_allowed_by_ask_get_a_certificate_on_first_contact() {
    let Some(pb) = Pebble::start(PebbleOpts::default()) else { return };
    let storage = pb.dir.path().join("acme");
    let ask = AskService::start(|name| !name.starts_with("evil"));
    let listener = format!(
        "[[listen]]\nport = {TLS_PORT}\ntls = {{}}\n\
         on_demand = {{ ask = \"http://127.0.0.1:{}/check\", rate = 5, per = \"10m\" }}\n",
        ask.port
    );
    let cfg = pb.config("od.toml", &listener, "", &[], &storage);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
        pb.dir.path().join("site").display()
    ));
    std::fs::write(&cfg, text).unwrap();
    let srv = start_selvedge(&cfg);
    // An allowed name: its first client gets the page, over a certificate made for it.
    let started = Instant::now();
    let (ok, body, err) = pb.get("shop.customer.test");
    assert!(ok && body == "acme site\n", "{err}\n{}", log_text(&srv));
    let first_contact = started.elapsed();
    assert_eq!(pb.orders(), 1);
    assert_eq!(ask.count("shop.customer.test"), 1);
    // Known now: no second question, no second order.
    assert!(pb.get("shop.customer.test").0);
    assert_eq!((ask.count("shop.customer.test"), pb.orders()), (1, 1));
    // A refused name: the handshake fails, nothing is ordered, and the refusal is remembered.
    for _ in 0..3 {
        let (ok, _, err) = pb.get("evil.customer.test");
        assert!(!ok, "a refused name was served");
        assert!(err.contains("alert") || err.contains("SSL"), "{err}");
    }
    assert_eq!(ask.count("evil.customer.test"), 1, "the refusal is cached");
    assert_eq!(pb.orders(), 1);
    assert_eq!(log_count(&srv, "on-demand: evil.customer.test: refused by ask"), 1);
    // A name the CA refuses: the first handshake waits for the failed order; the next ones
    // fail at once until the order's next attempt, instead of each waiting out its timeout.
    assert!(!pb.get("blocked.test").0);
    wait_log(&srv, "could not obtain a certificate for blocked.test (attempt 1)", 1, 20);
    let started = Instant::now();
    assert!(!pb.get("blocked.test").0);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // A burst of 100 unknown names, all allowed: rate = 5 per 10 minutes, two used above.
    let root = pb.root.clone();
    let handles: Vec<_> = (0..100)
        .map(|i| {
            let root = root.clone();
            std::thread::spawn(move || tls_connect(&format!("n{i}.burst.test"), &root).is_ok())
        })
        .collect();
    let served = handles.into_iter().map(|h| h.join().unwrap()).filter(|ok| *ok).count();
    assert_eq!(served, 3, "{}", log_text(&srv));
    assert_eq!(log_count(&srv, "orders in the last 600s already (rate)"), 97, "{}", log_text(&srv));
    eprintln!("on-demand: first contact took {first_contact:?}");
}

/// `openssl ocsp` answering for pebble's intermediate (its certificate and key fetched from
/// pebble's management interface), from an index file the test writes; answers are valid
/// for one minute.
struct OcspResponder {
    _proc: Proc,
    index: PathBuf,
}

impl OcspResponder {
    fn start(pb: &Pebble) -> OcspResponder {
        let mgmt = |path: &str| {
            let (ok, body, err) =
                curl(&["--cacert", pb.api_ca.to_str().unwrap(), &format!("https://127.0.0.1:{MGMT_PORT}{path}")]);
            assert!(ok && body.contains("-----BEGIN"), "pebble {path}: {err}");
            body
        };
        let inter = pb.dir.write("ocsp/inter.pem", mgmt("/intermediates/0"));
        let key = pb.dir.write("ocsp/inter.key", mgmt("/intermediate-keys/0"));
        let index = pb.dir.write("ocsp/index.txt", "");
        pb.dir.write("ocsp/index.txt.attr", "unique_subject = no\n");
        let proc = Proc::spawn(Command::new("openssl").args([
            "ocsp",
            "-index",
            index.to_str().unwrap(),
            "-port",
            &OCSP_PORT.to_string(),
            "-rsigner",
            inter.to_str().unwrap(),
            "-rkey",
            key.to_str().unwrap(),
            "-CA",
            inter.to_str().unwrap(),
            "-nmin",
            "1",
            "-ignore_err",
        ]));
        // Not a test connection: `openssl ocsp` waits forever on a connection that closes
        // without a request.
        eventually(10, "openssl ocsp listening", || proc.count("waiting for OCSP client connections") > 0);
        OcspResponder { _proc: proc, index }
    }

    /// Says `serial` (hex) is good, or revoked.
    fn set(&self, serial: &str, revoked: bool) {
        let line = if revoked {
            format!("R\t491231235959Z\t250101000000Z\t{}\tunknown\t/CN=x\n", serial.to_ascii_uppercase())
        } else {
            format!("V\t491231235959Z\t\t{}\tunknown\t/CN=x\n", serial.to_ascii_uppercase())
        };
        std::fs::write(&self.index, line).unwrap();
    }
}

/// `openssl s_client -status` for `name`: what it printed.
fn s_client_status(name: &str, root: &Path) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-status", "-connect", &format!("127.0.0.1:{TLS_PORT}"), "-servername", name])
        .args(["-CAfile", root.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ocsp_answers_are_stapled_refreshed_and_a_revoked_certificate_is_replaced() {
    let opts = PebbleOpts { ocsp_url: format!("http://127.0.0.1:{OCSP_PORT}"), ..Default::default() };
    let Some(pb) = Pebble::start(opts) else { return };
    let ocsp = OcspResponder::start(&pb);
    let storage = pb.dir.path().join("acme");
    let cfg = pb.config("ocsp.toml", &tls_listener(TLS_PORT), "", &[&["ocsp.test"]], &storage);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, "obtained a certificate for ocsp.test", 1, 60);
    let serial = peer_serial(&tls_connect("ocsp.test", &pb.root).unwrap());
    // Until the responder knows the certificate, nothing is stapled.
    wait_log(&srv, "does not know the certificate for ocsp.test", 1, 20);
    assert!(s_client_status("ocsp.test", &pb.root).contains("OCSP response: no response sent"));
    ocsp.set(&serial, false);
    wait_log(&srv, &format!("stapling a good answer for ocsp.test (serial {serial})"), 1, 30);
    let out = s_client_status("ocsp.test", &pb.root);
    assert!(out.contains("OCSP Response Status: successful") && out.contains("Cert Status: good"), "{out}");
    let first_update = out.lines().find(|l| l.contains("This Update")).unwrap().to_string();
    // Answers last a minute: fetched again after about thirty seconds.
    wait_log(&srv, &format!("stapling a good answer for ocsp.test (serial {serial})"), 2, 60);
    let out = s_client_status("ocsp.test", &pb.root);
    assert!(out.contains("Cert Status: good"), "{out}");
    assert_ne!(out.lines().find(|l| l.contains("This Update")).unwrap(), first_update, "the staple was refreshed");
    // The answer is kept with the certificate: after a restart it is stapled at once.
    assert_eq!(find(&storage, "ocsp.test.ocsp").len(), 1);
    drop(srv);
    let srv = start_selvedge(&cfg);
    wait_log(&srv, &format!("stapling the stored answer for ocsp.test (serial {serial}, Good)"), 1, 10);
    assert!(s_client_status("ocsp.test", &pb.root).contains("Cert Status: good"));
    // Revoked: the next answer says so, and a new certificate is ordered and served.
    ocsp.set(&serial, true);
    wait_log(&srv, &format!("(serial {serial}) is REVOKED, says its OCSP responder; ordering a replacement"), 1, 60);
    wait_log(&srv, "obtained a certificate for ocsp.test", 1, 60);
    let new_serial = peer_serial(&tls_connect("ocsp.test", &pb.root).unwrap());
    assert_ne!(new_serial, serial);
}
