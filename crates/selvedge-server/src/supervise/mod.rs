//! Running the server (`selvedge run`, `selvedge serve`) and watching over it: start-up
//! (`start`: diagnostics, the site, ACME, the admin listener, listeners, privileges), then
//! the signals until it stops.
//!
//! Signals: SIGHUP reloads the configuration and the certificates and reopens the logs
//! (listeners and connections stay: `reload`); SIGUSR1 only reopens the logs; SIGUSR2
//! starts the binary on disk on the same listening sockets, then drains and exits once it
//! is ready (`upgrade`); SIGTERM, SIGINT and SIGQUIT stop gracefully (in-flight requests
//! finish) and exit 0 (`signals`).

mod api;
mod reload;
mod signals;
mod start;
mod upgrade;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use selvedge::ServerHandle;
use tracing::{error, warn};

use crate::access_log::{AccessLog, LogConfig, LogTarget};
use crate::acme::Acme;
use crate::admin::{self, Admin};
use crate::config::{Config, TlsListen};
use crate::diag::{self, ErrorLog};
use crate::routes::{Front, Site};

/// Runs `cfg` until a signal stops it; `level` is `--log-level`, `exe` and `args` what a
/// binary upgrade starts.
pub fn run(cfg: Config, level: Option<&str>, exe: Option<PathBuf>, args: Vec<OsString>) -> ExitCode {
    let errors = match diagnostics(&cfg, level) {
        Ok(errors) => errors,
        Err(e) => {
            eprintln!("selvedge: {e}");
            return ExitCode::from(2);
        }
    };
    // Signal handlers before anything is served: a signal that comes as soon as the
    // startup line is out is handled, not fatal.
    let (rt, signals) = match signals::install() {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    match start::start(cfg, errors, &rt) {
        Ok(running) => signals::watch(running, rt, signals, exe, args),
        Err(e) => fail(e),
    }
}

/// Everything the signal loop works with.
struct Running {
    cfg: Config,
    front: Front,
    errors: ErrorLog,
    handle: ServerHandle,
    redirect: Option<ServerHandle>,
    cert_stores: Vec<(TlsListen, selvedge::tls::CertStore)>,
    /// Automatic HTTPS, if a virtual host has `tls = "acme"`.
    acme: Option<Acme>,
    /// The name of each listener of `handle`, by `bind*` index.
    names: Vec<String>,
    /// The name of each listener of `redirect`, by `bind*` index.
    redirect_names: Vec<String>,
    /// The admin listener, if configured.
    admin: Option<Admin>,
    /// The listeners' URLs (for the status page).
    urls: Vec<String>,
    /// The configuration API's document.
    api: api::ApiState,
    /// The configuration API's requests (`None` without an admin listener).
    api_rx: Option<tokio::sync::mpsc::UnboundedReceiver<admin::Cmd>>,
}

/// Opens the error log and sends diagnostics to it, at `level` or the configured one.
fn diagnostics(cfg: &Config, level: Option<&str>) -> Result<ErrorLog, String> {
    let errors = ErrorLog::open(&cfg.error_log.target).map_err(|e| format!("error log: {e}"))?;
    let filter = diag::filter(level, &cfg.error_log).map_err(|e| format!("log level: {e}"))?;
    diag::install(&errors, cfg.error_log.format, filter);
    Ok(errors)
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    error!("{msg}");
    ExitCode::from(2)
}

fn open_log(cfg: &LogConfig) -> std::io::Result<Option<AccessLog>> {
    if cfg.target == LogTarget::Off {
        return Ok(None);
    }
    AccessLog::open(cfg.clone()).map(Some)
}

/// Applies the memory settings, after start and each reload: the burst size after which
/// free heap memory goes back to the system (`[server] release_memory_after`), and letting
/// go of the executable's code pages that start-up (or the reload) brought in and the
/// request paths do not use (`[server] release_startup_code`; they come back from the page
/// cache if ever needed).
fn apply_memory_settings(cfg: &Config) {
    selvedge::heap::release_after_bursts(cfg.release_memory_after);
    if !cfg.release_startup_code {
        return;
    }
    match selvedge::server::release_code_pages() {
        Ok(kb) => tracing::debug!("released {kb} kB of start-up code pages"),
        Err(e) => warn!("releasing start-up code pages: {e}"),
    }
}

/// Records that the configuration in force was loaded now.
fn loaded_now() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    crate::metrics::registry().events.config_loaded.store(now, Ordering::Relaxed);
}

/// What the status page shows about `cfg`.
fn admin_info(cfg: &Config, site: &Site, listeners: Vec<String>) -> admin::Info {
    admin::Info {
        listeners,
        routes: site.describe_routes(),
        config_file: cfg.file.as_ref().map(|f| f.display().to_string()),
        workers: cfg.worker_count(),
    }
}

/// A TLS listener's certificates: its own if it has one (the default, for clients without
/// SNI or with an unknown name) and each virtual host's, chosen by SNI from the host's
/// names. ACME certificates are not here: they are managed (`acme::Acme::managed`).
fn load_certs(t: &TlsListen, cfg: &Config) -> std::io::Result<Vec<selvedge::tls::CertKey>> {
    let mut certs = Vec::new();
    if let (Some(c), Some(k)) = (&t.cert, &t.key) {
        certs.push(selvedge::tls::CertKey::from_pem_files(vec![], c, k)?);
    }
    for v in &cfg.vhosts {
        if let Some((c, k)) = &v.tls {
            certs.push(selvedge::tls::CertKey::from_pem_files(v.hosts.clone(), c, k)?);
        }
    }
    Ok(certs)
}
