//! `selvedge`: the web server on the selvedge engine.
//!
//! ```text
//! selvedge serve [DIR] [--host H] [--port P] [--workers N]
//! ```
//! Serves `DIR` (default: the bundled example site) as static files.

mod static_files;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use selvedge::{Server, Settings, Workers};

const USAGE: &str = "usage: selvedge serve [DIR] [--host H] [--port P] [--workers N]";

struct Args {
    root: PathBuf,
    host: IpAddr,
    port: u16,
    workers: Option<usize>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    match args.next().as_deref() {
        Some("serve") => {}
        Some("-h" | "--help") | None => return Err(USAGE.into()),
        Some(other) => return Err(format!("unknown command {other:?}\n{USAGE}")),
    }
    let mut out = Args { root: default_root(), host: IpAddr::from([127, 0, 0, 1]), port: 8080, workers: None };
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--host" => out.host = value("--host")?.parse().map_err(|e| format!("--host: {e}"))?,
            "--port" => out.port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?,
            "--workers" => out.workers = Some(value("--workers")?.parse().map_err(|e| format!("--workers: {e}"))?),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            dir => out.root = PathBuf::from(dir),
        }
    }
    Ok(out)
}

/// The bundled example site: next to the binary's source tree, or `./examples/site`.
fn default_root() -> PathBuf {
    let bundled = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/site"));
    if bundled.is_dir() {
        bundled
    } else {
        PathBuf::from("examples/site")
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let root = match args.root.canonicalize() {
        Ok(r) if r.is_dir() => r,
        _ => {
            eprintln!("selvedge: {} is not a directory", args.root.display());
            return ExitCode::from(2);
        }
    };
    let mut settings = Settings::default();
    if let Some(n) = args.workers {
        settings.workers = Workers::PerCore(n);
    }
    let workers = match settings.workers {
        Workers::PerCore(n) | Workers::MultiThread(n) => n,
    };
    let addr = SocketAddr::new(args.host, args.port);
    let app = static_files::StaticFiles::new(root.clone());
    let server = match Server::new(settings).bind(addr).start(app) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("selvedge: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = server.tcp_addr().unwrap_or(addr);
    eprintln!("selvedge: serving {} on http://{bound}/ with {workers} workers", root.display());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("signal runtime");
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
    eprintln!("selvedge: shutting down");
    server.shutdown();
    server.join();
    ExitCode::SUCCESS
}
