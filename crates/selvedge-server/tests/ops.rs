//! Operations, with the binary run as a process: bad configs refused with file:line:reason,
//! the access log (combined format, flushed each second, rotated by size), SIGHUP reload
//! under load with zero failed requests, graceful SIGTERM with a pid file.

mod common;

use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect, eventually, parse, Srv, TempDir, BIN};

fn config(d: &TempDir, extra: &str, root: &std::path::Path) -> std::path::PathBuf {
    d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\npid_file = \"run/selvedge.pid\"\n[[listen]]\nport = 0\n{extra}\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            root.display()
        ),
    )
}

#[test]
fn bad_configs_are_reported_and_refused() {
    let d = TempDir::new("badcfg");
    let cases = [
        ("[server]\nworkers = 2\nthreads = 4\n", 3, "threads"),
        ("[server]\nworkers = \"many\"\n", 2, "whole number"),
        ("[server]\nworkers = 0\n", 2, "greater than 0"),
        ("[timeouts]\nidle = 0\n", 2, "duration must be greater than 0"),
        ("[timeouts]\n\nheader = -5\n", 3, "must not be negative"),
        ("[timeouts]\nsend = \"5 parsecs\"\n", 2, "unknown unit \"parsecs\""),
        ("[limits]\nmax_body = \"10 MiBs\"\n", 2, "invalid size"),
        ("[limits]\nmax_head = \"1B\"\n", 2, "below the minimum"),
        ("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/no/such/dir\"\n", 4, "not a directory"),
        ("[[listen]]\nport = 70000\n", 2, ""),
        ("[log\naccess = 1\n", 1, ""),
        ("[[vhost]]\n[[vhost.route]]\npath = \"x\"\nroot = \"/tmp\"\n", 2, "must start with '/'"),
    ];
    for (i, (text, line, why)) in cases.iter().enumerate() {
        let f = d.write(&format!("bad{i}.toml"), text);
        let out = Command::new(BIN).args(["--config", f.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        let want = format!("{}:{line}:", f.display());
        assert!(err.contains(&want), "{text}: wanted {want} in {err}");
        assert!(err.contains(why), "{text}: wanted {why} in {err}");
        let check = Command::new(BIN).args(["--config", f.to_str().unwrap(), "--check"]).output().unwrap();
        assert_eq!(check.status.code(), Some(2));
    }
    let out = Command::new(BIN).args(["--config", "/no/such/file.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/no/such/file.toml: cannot read") && !err.contains(":0:0"), "{err}");
    let good = config(&d, "", d.path());
    let out = Command::new(BIN).args(["--config", good.to_str().unwrap(), "--check"]).output().unwrap();
    assert!(out.status.success());
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/selvedge.toml");
    let out = Command::new(BIN).args(["--config", example, "--check"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn access_log_combined_format_flush_and_rotation() {
    let d = TempDir::new("log");
    d.write("site/a.txt", "0123456789");
    let log = d.path().join("logs/access.log");
    let cfg = config(
        &d,
        &format!("[log]\naccess = \"{}\"\nsize = 2000\nbackups = 2\n", log.display()),
        &d.path().join("site"),
    );
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let r = s.get_h("/a.txt?q=\"x\"", &[("Referer", "http://ref.example/"), ("User-Agent", "tester/1.0")]);
    assert_eq!(r.status, 200);
    // Flushed within a second, without more traffic.
    eventually(5, "log line flushed", || std::fs::read_to_string(&log).is_ok_and(|t| !t.is_empty()));
    let line = std::fs::read_to_string(&log).unwrap();
    let re_ok = line.starts_with("127.0.0.1 - - [")
        && line.contains(" +0000] \"GET /a.txt?q=\\\"x\\\" HTTP/1.1\" 200 10 \"http://ref.example/\" \"tester/1.0\"\n");
    assert!(re_ok, "{line}");
    // Rotation: 2000-byte files, two backups.
    for _ in 0..100 {
        assert_eq!(s.get("/a.txt").status, 200);
    }
    let n = |k: u32| {
        let mut p = log.clone().into_os_string();
        p.push(format!(".{k}"));
        std::path::PathBuf::from(p)
    };
    eventually(5, "rotated files", || n(1).exists() && n(2).exists());
    assert!(!n(3).exists());
    let l1 = std::fs::metadata(n(1)).unwrap().len();
    assert!((1500..=2000).contains(&l1), "{l1}");
    // SIGHUP reopens: move the log away, HUP, and a new file appears. (A rotation still
    // under way leaves a moment between its rename and its new file: the move is retried.)
    eventually(5, "log moved", || std::fs::rename(&log, d.path().join("moved.log")).is_ok());
    s.signal("HUP");
    eventually(5, "reload", || s.stderr.lock().unwrap().iter().any(|l| l.contains("reloaded")));
    s.get("/a.txt");
    eventually(5, "reopened log", || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("GET /a.txt")));
    // Shutdown flushes what is buffered.
    s.get("/last-one");
    assert_eq!(s.stop(), Some(0));
    assert!(std::fs::read_to_string(&log).unwrap().contains("GET /last-one HTTP/1.1\" 404"));
}

#[test]
fn reload_under_load_drops_nothing() {
    let d = TempDir::new("reload");
    d.write("one/a.txt", "version one");
    d.write("two/a.txt", "version two");
    let cfg = config(&d, "", &d.path().join("one"));
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let addr = s.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for keep_alive in [true, true, false, false] {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        clients.push(std::thread::spawn(move || {
            let req = b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n";
            let mut conn = None;
            while !stop.load(Ordering::Relaxed) {
                let c = conn.get_or_insert_with(|| connect(addr));
                let mut good = c.write_all(req).is_ok();
                let mut buf = [0u8; 1024];
                let mut got = Vec::new();
                while good {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => good = false,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    if let Some(r) = parse(&got, true) {
                        if r.body.len() == 11 {
                            good = r.status == 200 && r.text().starts_with("version");
                            break;
                        }
                    }
                }
                if good {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                if !keep_alive {
                    conn = None;
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(200));
    // Each signal once the reload before it is done (two pending SIGHUPs are one signal),
    // the load running all along.
    let reloads = || s.stderr.lock().unwrap().iter().filter(|l| l.contains("reloaded")).count();
    for i in 0..7 {
        // Seven writes, flipping from "one" each time and ending on "two".
        let root = if i % 2 == 0 { "two" } else { "one" };
        config(&d, "", &d.path().join(root));
        s.signal("HUP");
        eventually(10, "the reload", || reloads() == i + 1);
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert_eq!(failed, 0, "{ok} ok");
    assert!(ok > 100, "only {ok} requests");
    assert_eq!(s.get("/a.txt").text(), "version two");
    assert_eq!(reloads(), 7);
    // A broken config on reload is reported and the running one kept.
    d.write("selvedge.toml", "[server]\nworkers = oops\n");
    s.signal("HUP");
    eventually(5, "reload failure", || s.stderr.lock().unwrap().iter().any(|l| l.contains("reload failed")));
    assert_eq!(s.get("/a.txt").text(), "version two");
}

#[test]
fn graceful_shutdown_finishes_in_flight_and_removes_pid_file() {
    let d = TempDir::new("graceful");
    let big = vec![b'z'; 8 << 20];
    d.write("site/big.bin", &big);
    let cfg = config(&d, "", &d.path().join("site"));
    let s = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let pid_file = d.path().join("run/selvedge.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert_eq!(pid, s.pid());
    let line = s.stderr.lock().unwrap()[0].clone();
    assert!(line.contains("with 1 worker; serving / → ") && line.contains("http://127.0.0.1:"), "{line}");

    let mut c = connect(s.addr);
    c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut first = [0u8; 4096];
    let n = c.read(&mut first).unwrap();
    assert!(n > 0);
    s.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    let mut all = first[..n].to_vec();
    all.extend_from_slice(&rest);
    let r = parse(&all, true).unwrap();
    assert_eq!((r.status, r.body.len()), (200, big.len()));
    let started = Instant::now();
    let mut s = s;
    let code = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st.code();
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(0));
    assert!(!pid_file.exists());
}

#[test]
fn serve_needs_no_config() {
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/site");
    let s = Srv::start(&["serve", site, "--port", "0", "--workers", "1"]);
    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("<html") || r.text().contains("<!doctype") || r.text().contains("<!DOCTYPE"));
    assert_eq!(s.stop(), Some(0));
    let out = Command::new(BIN).args(["serve", "/no/such/dir"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
