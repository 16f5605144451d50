//! The command line, with the binary run as a process: an installed copy serving the
//! directory it is started in, `--version`, `--help`, usage errors, environment variables,
//! `check` on good and bad files, completions and the manual page, the diagnostics' level
//! and JSON format.

mod common;

use std::process::{Command, Output, Stdio};

use common::{clean_env, Srv, TempDir, BIN};

fn selvedge(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A copy of the binary in a directory of its own (as `cargo install` leaves it), run from
/// another directory with `serve` and no DIR: it serves that directory.
#[test]
fn installed_binary_serves_the_directory_it_runs_in() {
    let d = TempDir::new("install");
    let bin = d.path().join("bin/selvedge");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(BIN, &bin).unwrap();
    d.write("www/index.html", "<!doctype html><title>here</title>\n");
    d.write("www/sub/note.txt", "the current directory");
    let mut cmd = Command::new(&bin);
    clean_env(&mut cmd);
    cmd.current_dir(d.path().join("www")).args(["serve", "-p", "0", "-w", "1"]);
    let s = Srv::spawn(cmd);
    assert_eq!(s.get("/sub/note.txt").text(), "the current directory");
    assert!(s.get("/").text().contains("<title>here</title>"));
    let line = s.stderr.lock().unwrap().iter().find(|l| l.contains("listening")).cloned().unwrap();
    assert!(line.contains(&d.path().join("www").display().to_string()), "{line}");
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn version_and_help_go_to_stdout() {
    for flag in ["-V", "--version"] {
        let out = selvedge(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(text(&out.stdout).trim(), format!("selvedge {}", env!("CARGO_PKG_VERSION")));
        assert!(out.stderr.is_empty());
    }
    for args in [&["-h"][..], &["--help"], &["help"], &["serve", "--help"], &["run", "-h"]] {
        let out = selvedge(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}");
        assert!(text(&out.stdout).contains("Usage: selvedge"), "{args:?}");
    }
    let serve = text(&selvedge(&["serve", "--help"]).stdout);
    for want in
        ["--tls-cert", "--tls-key", "-p, --port", "-w, --workers", "SELVEDGE_PORT", "SELVEDGE_ROOT", "SELVEDGE_HOST"]
    {
        assert!(serve.contains(want), "{want} missing from:\n{serve}");
    }
    let top = text(&selvedge(&["--help"]).stdout);
    for want in ["serve", "run", "check", "completions", "man", "--log-level", "USR2"] {
        assert!(top.contains(want), "{want} missing from:\n{top}");
    }
}

/// A usage error is clap's whole message on stderr, exit 2: what is wrong or missing (by
/// name), a similar name when there is one, and the usage line.
#[test]
fn usage_errors_say_what_is_wrong_and_exit_2() {
    for (args, want) in [
        (&["--frobnicate"][..], "unexpected argument '--frobnicate'"),
        (&["serve", "--nope"], "unexpected argument '--nope'"),
        (&["serve", "-p", "http"], "invalid value 'http'"),
        (&["fly"], "unrecognized subcommand 'fly'"),
        (&["serv"], "similar"),
        (&["serve", "--no-listin"], "--no-listing"),
        (&["run"], "--config <FILE>"),
        (&["serve", "--tls-cert", "c.pem"], "--tls-key"),
    ] {
        let out = selvedge(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(want) && err.contains("--help"), "{args:?}: wanted {want:?} in {err}");
        assert!(out.stdout.is_empty());
    }
    // Nothing at all: the help, on stderr, exit 2.
    let out = selvedge(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("Usage"));
    let out = selvedge(&["serve", "/no/such/dir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/no/such/dir is not a directory"));
}

/// Boolean variables take 1/0, yes/no, on/off, true/false; anything else is refused with
/// the variable's name.
#[test]
fn boolean_variables_take_the_usual_spellings() {
    let d = TempDir::new("bools");
    d.write("root/sub/a.txt", "a");
    for (value, listed) in
        [("1", false), ("yes", false), ("ON", false), ("true", false), ("0", true), ("off", true), ("no", true)]
    {
        let mut cmd = Command::new(BIN);
        clean_env(&mut cmd);
        cmd.args(["serve", d.path().join("root").to_str().unwrap(), "-p", "0", "-w", "1"])
            .env("SELVEDGE_NO_LISTING", value);
        let s = Srv::spawn(cmd);
        assert_eq!(s.get("/sub/").status == 200, listed, "SELVEDGE_NO_LISTING={value}");
    }
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    let out = cmd.args(["serve", "-p", "0"]).env("SELVEDGE_NO_LISTING", "maybe").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("SELVEDGE_NO_LISTING=maybe"), "{}", text(&out.stderr));
}

/// A reader that stops early is not an error: `selvedge completions zsh | head -3`. (The
/// pipe is closed before the process starts writing: its write fails with EPIPE.)
#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [&["completions", "zsh"][..], &["man"]] {
        let mut child = Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert!(!text(&out.stderr).contains("panicked"), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn serve_flags_come_from_the_environment() {
    let d = TempDir::new("env");
    d.write("root/a.txt", "from SELVEDGE_ROOT");
    let log = d.path().join("access.log");
    let pid = d.path().join("selvedge.pid");
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.current_dir("/")
        .arg("serve")
        .env("SELVEDGE_ROOT", d.path().join("root"))
        .env("SELVEDGE_HOST", "127.0.0.1")
        .env("SELVEDGE_PORT", "0")
        .env("SELVEDGE_WORKERS", "1")
        .env("SELVEDGE_ACCESS_LOG", &log)
        .env("SELVEDGE_PID_FILE", &pid)
        .env("SELVEDGE_MAX_AGE", "1h");
    let s = Srv::spawn(cmd);
    let r = s.get("/a.txt");
    assert_eq!(r.text(), "from SELVEDGE_ROOT");
    assert_eq!(r.header("cache-control"), Some("max-age=3600"));
    assert_eq!(std::fs::read_to_string(&pid).unwrap().trim(), s.pid().to_string());
    assert!(s.said("with 1 worker; serving / → "), "{:?}", s.stderr.lock().unwrap());
    assert_eq!(s.stop(), Some(0));
    assert!(std::fs::read_to_string(&log).unwrap().contains("GET /a.txt"));
    // A flag wins over its variable.
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.args(["serve", "--port", "0"]).env("SELVEDGE_ROOT", d.path().join("root")).env("SELVEDGE_PORT", "1");
    let s = Srv::spawn(cmd);
    assert_eq!(s.get("/a.txt").status, 200);
    assert_eq!(s.stop(), Some(0));
    // A bad value in a variable is a usage error naming it.
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    let out = cmd.args(["serve"]).env("SELVEDGE_PORT", "eighty").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("eighty"), "{}", text(&out.stderr));
}

#[test]
fn check_good_and_bad_files() {
    let d = TempDir::new("check");
    let good = d.write(
        "good.toml",
        format!(
            "[timeouts]\nidle = \"5m\"\n[limits]\nmax_body = \"10MiB\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.path().display()
        ),
    );
    let bad = d.write("bad.toml", "[timeouts]\nidle = \"5 fortnights\"\n");
    for args in [&["check", "-c"][..], &["check", "--config"], &["--config"], &["-c"]] {
        let check = |f: &std::path::Path| {
            let mut a: Vec<&str> = args.to_vec();
            a.push(f.to_str().unwrap());
            if args[0] != "check" {
                a.push("--check");
            }
            selvedge(&a)
        };
        let out = check(&good);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("is valid"));
        let out = check(&bad);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(&format!("{}:2:8: invalid duration", bad.display())), "{err}");
    }
    // `-t` is `--check`, as with nginx.
    assert_eq!(selvedge(&["-c", good.to_str().unwrap(), "-t"]).status.code(), Some(0));
    // An unknown user is found by check.
    let user = d.write(
        "user.toml",
        format!(
            "[server]\nuser = \"no-such-user-here\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.path().display()
        ),
    );
    let out = selvedge(&["check", "-c", user.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no-such-user-here"));
}

#[test]
fn completions_and_manual_page() {
    let out = selvedge(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    let bash = text(&out.stdout);
    assert!(bash.contains("_selvedge()") && bash.contains("--tls-cert"), "{bash}");
    for shell in ["zsh", "fish"] {
        let out = selvedge(&["completions", shell]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
    assert_eq!(selvedge(&["completions", "cmd.exe"]).status.code(), Some(2));
    let out = selvedge(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let man = text(&out.stdout);
    assert!(man.starts_with(".ie") || man.contains(".TH selvedge"), "{}", &man[..200.min(man.len())]);
    assert!(man.contains("serve"));
}

#[test]
fn diagnostics_are_leveled_and_json_on_request() {
    let d = TempDir::new("diag");
    d.write("site/a.txt", "x");
    let errors = d.path().join("logs/error.log");
    let cfg = d.write(
        "selvedge.toml",
        format!(
            "[[listen]]\nport = 0\n[log]\nerror = \"{}\"\nerror_format = \"json\"\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            errors.display(),
            d.path().join("site").display()
        ),
    );
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.args(["run", "-c", cfg.to_str().unwrap()]).stdin(std::process::Stdio::null());
    let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
    common::eventually(10, "startup event", || {
        std::fs::read_to_string(&errors).is_ok_and(|t| t.contains("listening on"))
    });
    common::kill("TERM", child.id());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let log = std::fs::read_to_string(&errors).unwrap();
    let first = log.lines().next().unwrap();
    assert!(first.starts_with("{\"timestamp\":\"20"), "{first}");
    assert!(
        first.contains("\"level\":\"INFO\"") && first.contains("\"message\":\"listening on http://127.0.0.1:"),
        "{first}"
    );
    assert!(log.contains("\"message\":\"stopped\""), "{log}");
    // Text on stderr by default: time, level, message; --log-level warn hides info.
    let site = d.path().join("site");
    let s = Srv::start(&["serve", site.to_str().unwrap(), "-p", "0"]);
    let line = s.stderr.lock().unwrap()[0].clone();
    assert!(line.starts_with("20") && line.contains("Z  INFO ") && line.contains("listening on"), "{line}");
    assert_eq!(s.stop(), Some(0));
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    let out = cmd.args(["serve", "/no/such/dir", "--log-level", "nonsense=="]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd);
    cmd.args(["serve", site.to_str().unwrap(), "-p", "0", "--log-level", "warn"]).env("RUST_LOG", "debug");
    let child = cmd.stderr(std::process::Stdio::piped()).stdout(std::process::Stdio::null()).spawn().unwrap();
    // Signalled once it handles SIGTERM (before that, the signal would kill it).
    common::eventually(10, "a SIGTERM handler", || catches_sigterm(child.id()));
    common::kill("TERM", child.id());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!text(&out.stderr).contains("INFO"), "{}", text(&out.stderr));
}

/// Whether process `pid` has a handler for SIGTERM (its bit in `SigCgt`).
fn catches_sigterm(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
}
