//! What a user switching from nginx or Caddy meets first: errors that point where the
//! mistake is, a port another server already has, the types of common files, environment
//! variables in the file, zstd, the systemd unit.

mod common;

use std::process::Command;

use common::{free_port, Srv, TempDir, BIN};

fn check(cfg: &std::path::Path, dir: Option<&std::path::Path>) -> (Option<i32>, String) {
    let mut cmd = Command::new(BIN);
    common::clean_env(&mut cmd);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let out = cmd.args(["check", "-c", cfg.to_str().unwrap()]).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A second default host and a bad regular expression are reported where they are written;
/// the expression's own message (with its caret) comes along.
#[test]
fn errors_point_at_the_mistake() {
    let d = TempDir::new("sw-errors");
    d.write("www/a.txt", "a");
    let two = d.write(
        "two.toml",
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n",
    );
    let (code, err) = check(&two, None);
    assert_eq!(code, Some(2));
    assert!(err.contains("two.toml:6:1:") && err.contains("default host"), "{err}");
    let regex = d.write(
        "regex.toml",
        "[[vhost]]\n[[vhost.redirect]]\nfrom = \"^/old/(.*$\"\nto = \"/new/$1\"\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n",
    );
    let (code, err) = check(&regex, None);
    assert_eq!(code, Some(2));
    assert!(err.contains("regex.toml:3:8:") && err.contains("unclosed group"), "{err}");
    assert!(err.contains("^/old/(.*$\n") && err.contains("      ^"), "the caret: {err}");
    let (code, err) = check(&d.path().join("missing.toml"), None);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing.toml: cannot read") && !err.contains(":0:0"), "{err}");
}

/// `check -c acme.toml`, a bare file name, takes a relative ACME `storage` from the current
/// directory as `-c ./acme.toml` does.
#[test]
fn a_bare_file_name_resolves_relative_paths() {
    let d = TempDir::new("sw-bare");
    d.write("www/a.txt", "a");
    d.write(
        "acme.toml",
        "[[listen]]\nport = 0\ntls = {}\n[acme]\nemail = \"ops@example.com\"\nstorage = \"acme-store\"\n\
         [[vhost]]\nhosts = [\"example.com\"]\ntls = \"acme\"\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n",
    );
    for name in ["acme.toml", "./acme.toml"] {
        let (code, err) = check(std::path::Path::new(name), Some(d.path()));
        assert_eq!(code, Some(0), "{name}: {err}");
    }
}

/// A port another process listens on is refused with a clear error (it used to start and
/// take a share of the connections, SO_REUSEPORT); `reuse_port = true` on both shares it.
#[test]
fn a_port_already_served_is_refused_unless_shared() {
    let d = TempDir::new("sw-port");
    d.write("www/a.txt", "a");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = d.write(
        "one.toml",
        format!("[[listen]]\nport = {port}\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n"),
    );
    let err = Srv::try_start(&["run", "-c", cfg.to_str().unwrap()]).err().expect("refused");
    assert!(err.iter().any(|l| l.contains("in use by another process") && l.contains("reuse_port")), "{err:?}");
    drop(taken);
    let free = free_port();
    let shared = d.write(
        "shared.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = {free}\nreuse_port = true\n[[vhost]]\n[[vhost.route]]\n\
             path = \"/\"\nroot = \"www\"\n"
        ),
    );
    let a = Srv::start(&["run", "-c", shared.to_str().unwrap()]);
    let b = Srv::start(&["run", "-c", shared.to_str().unwrap()]);
    assert_eq!((a.addr, b.addr), (b.addr, a.addr));
    let plain = d.write(
        "plain.toml",
        format!("[server]\nworkers = 1\n[[listen]]\nport = {free}\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"www\"\n"),
    );
    assert!(Srv::try_start(&["run", "-c", plain.to_str().unwrap()]).is_err(), "a third one that does not share");
}

/// Types from the shared MIME list for what the built-in table lacks, `[mime]` first;
/// `${VAR}` in the file; zstd for a client that asks for it, from a `.zst` sibling too.
#[test]
fn types_variables_and_zstd() {
    let d = TempDir::new("sw-types");
    for (f, body) in [("a.yaml", "a: 1\n"), ("b.m3u8", "#EXTM3U\n"), ("c.mov", "x"), ("d.log", "log\n")] {
        d.write(&format!("www/{f}"), body);
    }
    let text = "zstd ".repeat(200);
    d.write("www/z.txt", &text);
    d.write("www/pre.js", "precompressed();\n".repeat(40));
    d.write("www/pre.js.zst", zstd::encode_all("from the sibling\n".as_bytes(), 3).unwrap());
    let cfg = d.write(
        "selvedge.toml",
        "[server]\nworkers = 1\n[[listen]]\nport = 0\n[mime]\nlog = \"text/plain; charset=utf-8\"\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"${SELVEDGE_TEST_ROOT}\"\nmax_age = \"${SELVEDGE_TEST_AGE:-1h}\"\n",
    );
    let mut cmd = Command::new(BIN);
    common::clean_env(&mut cmd);
    cmd.args(["run", "-c", cfg.to_str().unwrap()]).env("SELVEDGE_TEST_ROOT", d.path().join("www"));
    let s = Srv::spawn(cmd);
    for (f, want) in [
        ("a.yaml", "yaml"),
        ("b.m3u8", "mpegurl"),
        ("c.mov", "video/quicktime"),
        ("d.log", "text/plain; charset=utf-8"),
    ] {
        let r = s.get(&format!("/{f}"));
        assert!(r.header("content-type").is_some_and(|t| t.contains(want)), "{f}: {:?}", r.header("content-type"));
        assert_eq!(r.header("cache-control"), Some("max-age=3600"), "the default of ${{SELVEDGE_TEST_AGE:-1h}}");
    }
    let r = s.get_h("/z.txt", &[("Accept-Encoding", "zstd")]);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert_eq!(zstd::decode_all(&r.body[..]).unwrap(), text.as_bytes());
    let r = s.get_h("/pre.js", &[("Accept-Encoding", "gzip, zstd;q=1.0, br;q=0.5")]);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert_eq!(zstd::decode_all(&r.body[..]).unwrap(), b"from the sibling\n");
    drop(s);
    // An unset variable: refused at its position.
    let (code, err) = check(&cfg, None);
    assert_eq!(code, Some(2));
    assert!(err.contains("selvedge.toml:10:9:") && err.contains("SELVEDGE_TEST_ROOT is not set"), "{err}");
}

/// The shipped systemd unit gives the server the directories it writes: its state (ACME's
/// default storage is under it), its logs, its runtime directory.
#[test]
fn the_systemd_unit_lets_the_server_write_its_state() {
    for unit in ["dist/selvedge.service", "dist/debian/selvedge.service"] {
        let text = std::fs::read_to_string(format!("{}/../../{unit}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        for want in
            ["StateDirectory=selvedge", "LogsDirectory=selvedge", "RuntimeDirectory=selvedge", "ProtectSystem=strict"]
        {
            assert!(text.lines().any(|l| l == want), "{unit}: {want}");
        }
    }
    assert!(selvedge_server::acme::config::DEFAULT_STORAGE.starts_with("/var/lib/selvedge/"));
}
