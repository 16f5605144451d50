//! Signals and systemd, with the binary run as a process: SIGUSR1 reopens the logs without
//! rereading the configuration, a failed reload still reopens them, SIGQUIT is a graceful
//! stop, `sd_notify` messages on a `NOTIFY_SOCKET`, socket activation (`LISTEN_FDS`), the
//! privilege drop on every thread, and a binary upgrade (SIGUSR2) under `wrk` load.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use common::{clean_env, connect, eventually, have, kill, parse, Srv, TempDir, BIN};

/// A config serving `root`, with an access log and an error log in `d/logs`.
fn config(d: &TempDir, root: &str, extra: &str) -> std::path::PathBuf {
    d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 2\npid_file = \"run/selvedge.pid\"\n{extra}\n[[listen]]\nport = 0\n\
             [log]\naccess = \"logs/access.log\"\nerror = \"logs/error.log\"\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.path().join(root).display()
        ),
    )
}

fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Starts the server of `cfg`; its startup line is in the error log, so wait for the
/// address there.
fn start_logged(d: &TempDir, cfg: &std::path::Path) -> (std::process::Child, std::net::SocketAddr) {
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    let child = cmd.args(["run", "-c", cfg.to_str().unwrap()]).stdin(Stdio::null()).spawn().unwrap();
    let errors = d.path().join("logs/error.log");
    let mut addr = None;
    eventually(10, "startup line in the error log", || {
        let t = read(&errors);
        addr = t.split("http://").nth(1).and_then(|r| r.split('/').next()).and_then(|a| a.parse().ok());
        addr.is_some()
    });
    (child, addr.unwrap())
}

fn get(addr: std::net::SocketAddr, path: &str) -> common::Resp {
    common::request(addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
}

#[test]
fn usr1_reopens_logs_and_does_not_reread_the_config() {
    let d = TempDir::new("usr1");
    d.write("one/a.txt", "one");
    d.write("two/a.txt", "two");
    let cfg = config(&d, "one", "");
    let (mut child, addr) = start_logged(&d, &cfg);
    assert_eq!(get(addr, "/a.txt").text(), "one");
    let (access, errors) = (d.path().join("logs/access.log"), d.path().join("logs/error.log"));
    eventually(5, "access line", || read(&access).contains("GET /a.txt"));
    // logrotate: move both files away, change the config on disk, USR1.
    std::fs::rename(&access, d.path().join("logs/access.log.1")).unwrap();
    std::fs::rename(&errors, d.path().join("logs/error.log.1")).unwrap();
    config(&d, "two", "");
    kill("USR1", child.id());
    eventually(5, "new error log", || read(&errors).contains("reopened the logs"));
    assert_eq!(get(addr, "/a.txt").text(), "one", "USR1 must not reread the configuration");
    eventually(5, "new access log", || read(&access).contains("GET /a.txt"));
    assert!(!read(&errors).contains("reloaded"));
    // HUP does reread it.
    kill("HUP", child.id());
    eventually(5, "reload", || read(&errors).contains("reloaded configuration"));
    assert_eq!(get(addr, "/a.txt").text(), "two");
    kill("TERM", child.id());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn failed_reload_still_reopens_the_logs() {
    let d = TempDir::new("badreload");
    d.write("one/a.txt", "one");
    let cfg = config(&d, "one", "");
    let (mut child, addr) = start_logged(&d, &cfg);
    let (access, errors) = (d.path().join("logs/access.log"), d.path().join("logs/error.log"));
    assert_eq!(get(addr, "/a.txt").status, 200);
    eventually(5, "access line", || read(&access).contains("GET /a.txt"));
    std::fs::rename(&access, d.path().join("logs/access.log.1")).unwrap();
    std::fs::rename(&errors, d.path().join("logs/error.log.1")).unwrap();
    std::fs::write(&cfg, "[timeouts]\nidle = \"forever\"\n").unwrap();
    kill("HUP", child.id());
    eventually(5, "failure in the new error log", || read(&errors).contains("reload failed"));
    let e = read(&errors);
    assert!(e.contains("selvedge.toml:2:8: invalid duration"), "{e}");
    assert!(e.contains("the logs were reopened"), "{e}");
    assert_eq!(get(addr, "/a.txt").text(), "one");
    eventually(5, "new access log", || read(&access).contains("GET /a.txt"));
    kill("TERM", child.id());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn sigquit_finishes_in_flight_requests_and_exits_0() {
    let d = TempDir::new("quit");
    let big = vec![b'q'; 4 << 20];
    d.write("site/big.bin", &big);
    let site = d.path().join("site");
    let mut s = Srv::start(&["serve", site.to_str().unwrap(), "-p", "0", "-w", "1"]);
    let mut c = connect(s.addr);
    c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut first = [0u8; 4096];
    let n = c.read(&mut first).unwrap();
    s.signal("QUIT");
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    let mut all = first[..n].to_vec();
    all.extend_from_slice(&rest);
    let r = parse(&all, true).unwrap();
    assert_eq!((r.status, r.body.len()), (200, big.len()));
    assert_eq!(s.wait_exit(10), Some(0), "SIGQUIT is a graceful stop, not a core dump");
    assert!(s.said("shutting down") && s.said("stopped"));
}

/// Reads `NOTIFY_SOCKET` datagrams until one contains `want`.
fn expect_notify(sock: &UnixDatagram, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 512];
    loop {
        assert!(Instant::now() < deadline, "no {want} on NOTIFY_SOCKET");
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.lines().any(|l| l == want) {
                return msg;
            }
        }
    }
}

#[test]
fn sd_notify_ready_reloading_stopping() {
    let d = TempDir::new("notify");
    d.write("site/a.txt", "x");
    let path = d.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.path().join("site").display()
        ),
    );
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.args(["run", "-c", cfg.to_str().unwrap()]).env("NOTIFY_SOCKET", &path);
    let mut s = Srv::spawn(cmd);
    let ready = expect_notify(&sock, "READY=1");
    // READY comes once the listener answers.
    assert_eq!(s.get("/a.txt").status, 200, "{ready}");
    s.signal("HUP");
    let reloading = expect_notify(&sock, "RELOADING=1");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    expect_notify(&sock, "READY=1");
    s.signal("TERM");
    expect_notify(&sock, "STOPPING=1");
    assert_eq!(s.wait_exit(10), Some(0));
}

/// Runs the binary with `fds` at descriptors 3… and `LISTEN_FDS`, `LISTEN_PID` (set by
/// `/bin/sh` to its own id before it execs the binary), as systemd does.
fn activated(args: &[&str], fds: Vec<OwnedFd>, names: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    clean_env(&mut cmd);
    cmd.arg("-c").arg("LISTEN_PID=$$; export LISTEN_PID; exec \"$0\" \"$@\"").arg(BIN).args(args);
    cmd.env("LISTEN_FDS", fds.len().to_string()).env("LISTEN_FDNAMES", names);
    let mappings = fds.into_iter().enumerate().map(|(i, fd)| FdMapping { parent_fd: fd, child_fd: 3 + i as i32 });
    cmd.fd_mappings(mappings.collect()).unwrap();
    cmd
}

#[test]
fn socket_activation_serves_on_the_passed_socket() {
    let d = TempDir::new("activate");
    d.write("site/a.txt", "activated");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let site = d.path().join("site");
    let s =
        Srv::spawn(activated(&["serve", site.to_str().unwrap(), "-p", "0", "-w", "2"], vec![listener.into()], "web"));
    assert_eq!(s.addr, addr, "the server announces the passed socket");
    let line = s.stderr.lock().unwrap().iter().find(|l| l.contains("listening")).cloned().unwrap();
    assert!(line.contains("1 inherited sockets") && line.matches("http://").count() == 1, "{line}");
    for _ in 0..4 {
        assert_eq!(s.get("/a.txt").text(), "activated");
    }
    // The variables are not left for child processes, and the fd is close-on-exec.
    let env = std::fs::read(format!("/proc/{}/environ", s.pid())).unwrap();
    assert!(String::from_utf8_lossy(&env).contains("LISTEN_FDS"), "the kernel's copy of the initial environment");
    assert_eq!(s.stop(), Some(0));

    // With a config file, a socket of the same address takes the listener's place.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[[listen]]\naddress = \"{addr}\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            site.display()
        ),
    );
    let s = Srv::spawn(activated(&["run", "-c", cfg.to_str().unwrap()], vec![listener.into()], "unknown"));
    assert_eq!(s.addr, addr);
    assert_eq!(s.get("/a.txt").text(), "activated");
    assert_eq!(s.stop(), Some(0));
}

/// The uid and gid lines (real, effective, saved, fs) of every thread of `pid`.
fn thread_ids(pid: u32) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap_or("")
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push((t.file_name().to_string_lossy().into_owned(), field("Uid:"), field("Gid:")));
    }
    out
}

fn id_of(flag: &str, user: &str) -> String {
    let out = Command::new("id").args([flag, user]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn privileges_are_dropped_on_every_thread() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED privileges_are_dropped_on_every_thread: needs root (to start as root and drop to nobody)");
        return;
    }
    let d = TempDir::new("privdrop");
    d.write("site/a.txt", "as nobody");
    let (uid, gid) = (id_of("-u", "nobody"), id_of("-g", "nobody"));
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nuser = \"nobody\"\nworkers = 3\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.path().join("site").display()
        ),
    );
    let s = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    assert_eq!(s.get("/a.txt").text(), "as nobody");
    let threads = thread_ids(s.pid());
    assert!(threads.len() >= 4, "main, 3 workers, timeout manager: {threads:?}");
    for (tid, u, g) in &threads {
        assert_eq!(*u, format!("{uid} {uid} {uid} {uid}"), "thread {tid} uid");
        assert_eq!(*g, format!("{gid} {gid} {gid} {gid}"), "thread {tid} gid");
    }
    assert!(s.said("running as nobody:"));
    // Still answering after the drop, from every worker.
    for _ in 0..6 {
        assert_eq!(s.get("/a.txt").status, 200);
    }
    assert_eq!(s.stop(), Some(0));
}

/// The pid a CGI script reports as its parent: the selvedge process that ran it.
fn server_pid(addr: std::net::SocketAddr) -> u32 {
    let r = get(addr, "/cgi/pid.sh");
    assert_eq!(r.status, 200, "{r:?}");
    r.text().trim().parse().unwrap_or_else(|_| panic!("{r:?}"))
}

#[test]
fn binary_upgrade_under_load_drops_nothing() {
    if !have("wrk") {
        common::missing_tool("wrk", "binary_upgrade_under_load_drops_nothing");
        return;
    }
    let d = TempDir::new("upgrade");
    d.write("site/a.txt", "same content from both processes");
    d.write(
        "cgi/pid.sh",
        "#!/bin/sh\npid=$PPID\nprintf 'Content-Type: text/plain\\r\\nContent-Length: %d\\r\\n\\r\\n%s' ${#pid} \"$pid\"\n",
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.path().join("cgi/pid.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 2\npid_file = \"run/selvedge.pid\"\n[[listen]]\nport = 0\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}/site\"\n[[vhost.route]]\npath = \"/cgi\"\ncgi = {{ dir = \"{0}/cgi\" }}\n",
            d.path().display()
        ),
    );
    let mut old = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    let addr = old.addr;
    assert_eq!(server_pid(addr), old.pid());
    // Kept-alive connections, and a new connection per request (connections the old
    // process has accepted and not yet served when it drains must be served, not dropped).
    let wrk = |conns: &str, extra: &[&str]| {
        Command::new("wrk")
            .args(["-t1", conns, "-d4s"])
            .args(extra)
            .arg(format!("http://{addr}/a.txt"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let kept = wrk("-c32", &[]);
    let fresh = wrk("-c8", &["-H", "Connection: close"]);
    std::thread::sleep(Duration::from_millis(1200));
    old.signal("USR2");
    assert_eq!(old.wait_exit(20), Some(0), "the old process drains and exits");
    let lines = old.stderr.lock().unwrap().clone();
    let fresh = fresh.wait_with_output().unwrap();
    let fresh_report = String::from_utf8_lossy(&fresh.stdout).into_owned();
    assert!(fresh.status.success(), "{fresh_report}");
    assert!(
        !fresh_report.contains("Socket errors") && !fresh_report.contains("Non-2xx"),
        "failed requests, a new connection each:\n{fresh_report}\n{lines:#?}"
    );
    let out = kept.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("Socket errors") && !report.contains("Non-2xx"), "failed requests:\n{report}\n{lines:#?}");
    let requests: u64 =
        report.lines().find_map(|l| l.trim().split(" requests in").next()?.trim().parse().ok()).unwrap();
    assert!(requests > 1000, "{report}");
    // The new process answers on the same address, and the pid file names it.
    let new_pid = server_pid(addr);
    assert_ne!(new_pid, old.pid());
    let pid_file: u32 = read(&d.path().join("run/selvedge.pid")).trim().parse().unwrap();
    assert_eq!(pid_file, new_pid);
    assert_eq!(get(addr, "/a.txt").text(), "same content from both processes");
    assert!(lines.iter().any(|l| l.contains(&format!("upgrade: process {new_pid} is ready"))), "{lines:#?}");
    kill("TERM", new_pid);
    eventually(20, "the new process exits", || {
        !std::path::Path::new(&format!("/proc/{new_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{new_pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
}

/// The upgrade's readiness goes over a socket pair the new process inherits: another local
/// process can neither take its name first (it blocked the upgrade when it was a named
/// abstract socket) nor speak on it.
#[test]
fn binary_upgrade_readiness_cannot_be_squatted() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
    let d = TempDir::new("upgrade-squat");
    d.write("site/a.txt", "a");
    d.write(
        "cgi/pid.sh",
        "#!/bin/sh\npid=$PPID\nprintf 'Content-Type: text/plain\\r\\nContent-Length: %d\\r\\n\\r\\n%s' ${#pid} \"$pid\"\n",
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.path().join("cgi/pid.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{0}/site\"\n\
             [[vhost.route]]\npath = \"/cgi\"\ncgi = {{ dir = \"{0}/cgi\" }}\n",
            d.path().display()
        ),
    );
    let mut old = Srv::start(&["run", "-c", cfg.to_str().unwrap()]);
    // The names the readiness socket would have had, taken first.
    let squatted: Vec<UnixDatagram> = (0..4)
        .filter_map(|n| {
            let name = format!("selvedge-upgrade-{}-{n}", old.pid());
            UnixDatagram::bind_addr(&UnixAddr::from_abstract_name(name.as_bytes()).unwrap()).ok()
        })
        .collect();
    assert_eq!(squatted.len(), 4);
    old.signal("USR2");
    assert_eq!(old.wait_exit(20), Some(0), "the upgrade went through: {:#?}", old.stderr.lock().unwrap());
    let new_pid = server_pid(old.addr);
    assert_ne!(new_pid, old.pid());
    // No readiness word reached a squatter.
    for s in &squatted {
        s.set_nonblocking(true).unwrap();
        assert!(s.recv(&mut [0u8; 64]).is_err());
    }
    kill("TERM", new_pid);
    eventually(20, "the new process exits", || {
        !std::path::Path::new(&format!("/proc/{new_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{new_pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
}

/// Kilobytes of the executable's code (its `r-xp` mapping) resident in process `pid`.
fn code_resident_kb(pid: u32) -> u64 {
    let smaps = read(std::path::Path::new(&format!("/proc/{pid}/smaps")));
    let mut in_code = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some(range) if range.contains('-') && range.chars().all(|c| c.is_ascii_hexdigit() || c == '-') => {
                let perms = f.next().unwrap_or("");
                in_code = perms == "r-xp" && line.trim_end().ends_with("/selvedge");
            }
            Some("Rss:") if in_code => kb += f.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0),
            _ => {}
        }
    }
    kb
}

#[test]
fn start_up_code_pages_are_let_go_and_the_server_still_serves() {
    let d = TempDir::new("codepages");
    d.write("site/a.txt", "code pages");
    let kept_dir = TempDir::new("codepages-kept");
    kept_dir.write("site/a.txt", "code pages");
    let released_cfg = config(&d, "site", "");
    let kept_cfg = config(&kept_dir, "site", "release_startup_code = false");
    let (mut released, addr) = start_logged(&d, &released_cfg);
    let (mut kept, kept_addr) = start_logged(&kept_dir, &kept_cfg);
    // The release comes right after the startup line; both have served a request since.
    let mut last = (0, 0);
    eventually(10, "the released server's code resident well below the kept one's", || {
        assert_eq!(get(addr, "/a.txt").text(), "code pages");
        assert_eq!(get(kept_addr, "/a.txt").text(), "code pages");
        last = (code_resident_kb(released.id()), code_resident_kb(kept.id()));
        last.0 > 0 && last.0 + 1024 < last.1
    });
    // A reload runs the configuration code again and lets go of it again (the request
    // path's pages too, until a request brings them back); requests still run.
    let served = code_resident_kb(released.id());
    kill("HUP", released.id());
    eventually(10, "the reload in the error log", || read(&d.path().join("logs/error.log")).contains("reloaded"));
    eventually(10, "the code resident after the reload below the figure before it", || {
        code_resident_kb(released.id()) + 512 < served
    });
    for _ in 0..20 {
        assert_eq!(get(addr, "/a.txt").text(), "code pages");
    }
    eprintln!("code resident: released {} kB, kept {} kB", last.0, last.1);
    for (s, p) in [(&mut released, &d), (&mut kept, &kept_dir)] {
        kill("TERM", s.id());
        assert!(s.wait().unwrap().success(), "{}", read(&p.path().join("logs/error.log")));
    }
}
