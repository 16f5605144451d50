//! SIGHUP: the configuration, certificates and logs reloaded while listeners and
//! connections stay; SIGUSR1: the logs reopened.

use std::sync::atomic::Ordering;

use tracing::{error, info, warn};

use super::{admin_info, load_certs, loaded_now, open_log, Running};
use crate::access_log::{LogConfig, LogTarget};
use crate::config::{Config, TlsListen};
use crate::diag::ErrorTarget;
use crate::routes::{self, Site};

/// SIGHUP: reread the configuration file (if any), swap in the new site, reload the
/// certificates, reopen the logs. A bad file is reported and the running configuration
/// kept; the logs are reopened all the same (logrotate may have moved them). The file
/// replaces changes made through the admin API that were not written to it (a warning
/// says how many).
pub(super) fn reload(r: &mut Running) -> Result<(), String> {
    let (new, site) = match load(&r.cfg) {
        Ok(b) => b,
        Err(e) => {
            // The logs first, so that the failure is in the new error log.
            let (log, errors) = (r.cfg.log.clone(), r.cfg.error_log.target.clone());
            reopen_logs(r, &log, &errors);
            error!("reload failed, keeping the running configuration (the logs were reopened): {e}");
            crate::metrics::registry().events.reloads_failed.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
    };
    reopen_logs(r, &new.log, &new.error_log.target);
    apply(r, new, site);
    if r.api.unsaved > 0 {
        warn!(
            "the configuration file replaced {} change(s) made through the admin API since it was loaded (set \
             [admin] persist to the configuration file to keep them)",
            r.api.unsaved
        );
    }
    r.api.reset(&r.cfg);
    crate::metrics::registry().events.reloads_ok.fetch_add(1, Ordering::Relaxed);
    info!("reloaded configuration");
    Ok(())
}

/// Puts `new` (and its `site`) in force as a reload does: the site swapped in, the
/// certificates and ACME names reloaded, the listeners and workers kept. Whether `new`
/// asks for what changes only on restart.
pub(super) fn apply(r: &mut Running, new: Config, site: Site) -> bool {
    let restart = new.listen != r.cfg.listen
        || new.workers != r.cfg.workers
        || new.settings.io != r.cfg.settings.io
        || new.user != r.cfg.user
        || new.proxy_protocol != r.cfg.proxy_protocol
        || new.shared != r.cfg.shared
        || new.admin != r.cfg.admin
        || new.fleet != r.cfg.fleet
        || new.pid_file != r.cfg.pid_file;
    if restart {
        warn!(
            "listeners (and their proxy_protocol and reuse_port), workers, io, user, pid_file, [admin] and [fleet] change \
             only on restart (or upgrade, SIGUSR2)"
        );
    }
    let log = Option::clone(&r.front.log.load());
    crate::client::set_trusted(&new.trusted_proxies);
    crate::files::mime::set_overrides(&new.mime);
    r.front.swap(site, routes::engine_pages(&new), log);
    reload_certs(&r.cert_stores, &new);
    let specs = new.acme_specs();
    match &r.acme {
        Some(a) => a.reload(&tokio::runtime::Handle::current(), new.acme.as_ref(), &specs),
        None if !specs.is_empty() => warn!("tls = \"acme\" applies on restart"),
        None => {}
    }
    keep_listeners(&mut r.cfg, new);
    loaded_now();
    if let Some(a) = &r.admin {
        a.set_info(admin_info(&r.cfg, &r.front.site.load(), r.urls.clone()));
    }
    restart
}

/// The configuration file read again (the same configuration without one) and its site.
fn load(cfg: &Config) -> Result<(Config, Site), String> {
    let new = match &cfg.file {
        None => cfg.clone(),
        Some(f) => Config::load(f).map_err(|e| e.to_string())?,
    };
    let site = Site::build(&new).map_err(|e| e.to_string())?;
    Ok((new, site))
}

/// `new` in force, but for what changes only on restart: the listeners (with their
/// `proxy_protocol` and `reuse_port`) and the workers.
fn keep_listeners(cfg: &mut Config, new: Config) {
    let admin = cfg.admin.take();
    let fleet = cfg.fleet.take();
    let listen = std::mem::take(&mut cfg.listen);
    let proxy_protocol = std::mem::take(&mut cfg.proxy_protocol);
    let shared = std::mem::take(&mut cfg.shared);
    let workers = cfg.workers;
    *cfg = new;
    cfg.listen = listen;
    cfg.proxy_protocol = proxy_protocol;
    cfg.shared = shared;
    cfg.workers = workers;
    cfg.admin = admin;
    cfg.fleet = fleet;
}

/// Reopens the access log (with `log`'s settings) and the error log (at `errors`).
/// Failures are reported and the files in use kept.
pub(super) fn reopen_logs(r: &Running, log: &LogConfig, errors: &ErrorTarget) {
    if let Err(e) = r.errors.reopen(errors) {
        error!("reopening the error log: {e}");
    }
    let old = r.front.log.load_full();
    let new = match (old.as_ref(), &log.target) {
        (_, LogTarget::Off) => None,
        // Another format or request id setting: a new log (the old one is flushed).
        (Some(l), _) if *l.format() != log.format || l.trust_request_id() != log.trust_request_id => {
            l.flush();
            match open_log(log) {
                Ok(l) => l,
                Err(e) => {
                    error!("opening the access log: {e}");
                    Some(l.clone())
                }
            }
        }
        (Some(l), _) => {
            if let Err(e) = l.reopen(log.clone()) {
                error!("reopening the access log: {e}");
            }
            Some(l.clone())
        }
        (None, _) => match open_log(log) {
            Ok(l) => l,
            Err(e) => {
                error!("opening the access log: {e}");
                None
            }
        },
    };
    let same = match (&new, old.as_ref()) {
        (Some(a), Some(b)) => a.same(b),
        (None, None) => true,
        _ => false,
    };
    if !same {
        r.front.log.store(std::sync::Arc::new(new));
    }
}

/// Reloads each TLS listener's certificate and key from their files; new handshakes use
/// them, open connections are untouched. A bad pair is reported and the old one kept.
fn reload_certs(stores: &[(TlsListen, selvedge::tls::CertStore)], cfg: &Config) {
    for (t, store) in stores {
        match load_certs(t, cfg) {
            Ok(certs) => {
                store.replace(certs);
                crate::ocsp::wake();
            }
            Err(e) => error!("tls reload kept the old certificates for {:?}: {e}", t.addr),
        }
    }
}
