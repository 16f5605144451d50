//! SIGUSR2: the binary on disk started on this process's listening sockets; once it is
//! ready, this one drains and exits.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use tracing::{error, info};

use super::Running;
use crate::service::{self, notify, UpgradeOutcome};

/// SIGUSR2: starts the binary on disk on our listening sockets and waits until it is
/// ready. `true`: it serves, this process should drain and exit.
pub(super) async fn upgrade(r: &Running, exe: Option<&Path>, args: &[OsString]) -> bool {
    let Some(exe) = exe else {
        error!("upgrade: the path of the running binary is unknown");
        return false;
    };
    let mut fds = Vec::new();
    for (handle, names) in [(Some(&r.handle), &r.names), (r.redirect.as_ref(), &r.redirect_names)] {
        let Some(h) = handle else { continue };
        match h.listener_fds() {
            Ok(v) => fds.extend(v.into_iter().map(|(fd, i)| (fd, names.get(i).cloned().unwrap_or_default()))),
            Err(e) => {
                error!("upgrade: duplicating the listening sockets: {e}");
                return false;
            }
        }
    }
    info!("upgrade: starting {} on {} sockets ({})", exe.display(), fds.len(), service::describe_fds(&fds));
    let up = match service::upgrade(exe, args, fds) {
        Ok(u) => u,
        Err(e) => {
            error!("upgrade: cannot start {}: {e}", exe.display());
            return false;
        }
    };
    let pid = up.child.id();
    match up.wait(Duration::from_secs(60)).await {
        UpgradeOutcome::Ready(pid) => {
            info!("upgrade: process {pid} is ready; this one ({}) drains and exits", std::process::id());
            notify::main_pid(pid);
            true
        }
        UpgradeOutcome::Exited(st) => {
            error!("upgrade: process {pid} exited ({st}) before it was ready; still serving");
            false
        }
        UpgradeOutcome::TimedOut => {
            error!("upgrade: process {pid} was not ready within 60 s and was stopped; still serving");
            false
        }
    }
}
