//! The signal loop, and the stop it ends in: graceful, or a drain after an upgrade.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::info;

use super::{api, apply_memory_settings, reload, upgrade, Running};
use crate::admin;
use crate::service::notify;

/// The signals the server handles.
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

/// What ends the signal loop.
enum Stop {
    /// TERM, INT or QUIT: graceful shutdown.
    Graceful,
    /// A new process took over: drain, then shut down.
    Upgraded,
}

/// The runtime the signals are handled on, with the handlers installed.
pub(super) fn install() -> Result<(Runtime, Signals), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("signal runtime: {e}"))?;
    let signals = rt.block_on(async { Signals::new() }).map_err(|e| format!("signal handlers: {e}"))?;
    Ok((rt, signals))
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

/// Handles signals until one stops the server, then stops it.
pub(super) fn watch(
    mut r: Running,
    rt: Runtime,
    mut s: Signals,
    exe: Option<PathBuf>,
    args: Vec<OsString>,
) -> ExitCode {
    let mut api_rx = r.api_rx.take();
    let stop = rt.block_on(async {
        loop {
            let api_cmd = async {
                match &mut api_rx {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(cmd) = api_cmd => {
                    if api::handle(&mut r, cmd) {
                        return Stop::Graceful;
                    }
                    apply_memory_settings(&r.cfg);
                }
                _ = s.term.recv() => return Stop::Graceful,
                _ = s.int.recv() => return Stop::Graceful,
                _ = s.quit.recv() => return Stop::Graceful,
                _ = s.hup.recv() => {
                    notify::reloading();
                    let _ = reload::reload(&mut r);
                    notify::ready("serving (reloaded)");
                    apply_memory_settings(&r.cfg);
                }
                _ = s.usr1.recv() => {
                    reload::reopen_logs(&r, &r.cfg.log.clone(), &r.cfg.error_log.target.clone());
                    info!("reopened the logs");
                }
                _ = s.usr2.recv() => {
                    if upgrade::upgrade(&r, exe.as_deref(), &args).await {
                        return Stop::Upgraded;
                    }
                }
            }
        }
    });
    stop_serving(r, stop);
    ExitCode::SUCCESS
}

/// Stops the listeners (after a drain, when upgraded), flushes the access log, removes the
/// pid file if it is still ours, stops the admin listener.
fn stop_serving(mut r: Running, stop: Stop) {
    notify::stopping();
    admin::set_state(admin::State::Draining);
    if let Stop::Upgraded = stop {
        drain(&r);
    } else {
        info!("shutting down (draining in-flight requests)");
    }
    r.handle.shutdown();
    if let Some(x) = &r.redirect {
        x.shutdown();
    }
    r.handle.join();
    if let Some(x) = r.redirect.take() {
        x.join();
    }
    if let Some(log) = r.front.log.load().as_ref() {
        log.flush();
    }
    if let Some(p) = &r.cfg.pid_file {
        // After an upgrade the file names the new process: leave it.
        let ours = std::fs::read_to_string(p).is_ok_and(|t| t.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(p);
        }
    }
    crate::fleet::members::leave();
    if let Some(a) = r.admin.take() {
        a.stop();
    }
    info!("stopped");
}

/// Connections end after their next exchange; idle ones have until the graceful timeout
/// (or until they are all gone).
fn drain(r: &Running) {
    r.handle.drain();
    if let Some(x) = &r.redirect {
        x.drain();
    }
    let deadline = Instant::now() + r.cfg.settings.graceful_timeout;
    let live = |r: &Running| r.handle.live_connections() + r.redirect.as_ref().map_or(0, |x| x.live_connections());
    while live(r) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    info!("drained; {} connections left are closed", live(r));
}
