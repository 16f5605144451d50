//! The maintenance thread: active health checks and re-resolution of host names, for every
//! pool that has them, on one thread with a small runtime of its own (never on the
//! workers, so a slow upstream or resolver cannot stall a request).
//!
//! Pools register when they are built; nothing runs until [`start_maintenance`] (the
//! server calls it once it serves; `selvedge check` never does). A pool's tasks end when
//! the pool is gone (after a reload, once no worker uses it any more).
//!
//! - **Checks**: every `interval`, each member gets `GET path` (through the proxy's
//!   transport: [`Probe`]) within `timeout`; the answer's status must match `expect`.
//!   `unhealthy` failures in a row take the member out, `healthy` passes in a row bring
//!   it back ([`super::health::Streak`]). New members start in.
//! - **Re-resolution**: every `resolve`, each upstream host name is resolved again (off
//!   the runtime, in a blocking task); when its addresses change the pool's members are
//!   rebuilt (members that stay keep their slot, health and idle connections; requests in
//!   flight to a removed one finish) and the workers pick the new set up on their next
//!   request. A failed resolution, or one that finds no address, keeps the addresses the
//!   pool has (logged).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::mpsc;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use super::health::Streak;
use super::{dns, Addr, Endpoint, HealthCheck, Members, PoolConfig, Shared};

/// A health check's answer: the response status, or why there was none.
pub type ProbeFuture = Pin<Box<dyn Future<Output = Result<u16, String>> + Send>>;

/// Runs one health check of a member (the transport's job; the timeout is applied here).
pub type Probe = Arc<dyn Fn(Arc<Endpoint>) -> ProbeFuture + Send + Sync>;

/// A pool's background work.
struct Job {
    shared: Weak<Shared>,
    cfg: Arc<PoolConfig>,
    probe: Option<Probe>,
}

enum State {
    /// Not started: jobs wait here.
    Idle(Vec<Job>),
    /// Running: jobs go to the thread.
    Running(mpsc::UnboundedSender<Job>),
}

static STATE: Mutex<State> = Mutex::new(State::Idle(Vec::new()));

/// Registers a pool's background work.
pub(super) fn register(shared: Weak<Shared>, cfg: Arc<PoolConfig>, probe: Option<Probe>) {
    let job = Job { shared, cfg, probe };
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *s {
        State::Idle(jobs) => {
            jobs.retain(|j| j.shared.strong_count() > 0);
            jobs.push(job);
        }
        State::Running(tx) => {
            let _ = tx.send(job);
        }
    }
}

/// Starts the maintenance thread (once; later calls do nothing): the pools built so far
/// and every pool built after get their checks and re-resolution.
///
/// # Errors
/// The thread or its runtime could not start.
pub fn start_maintenance() -> std::io::Result<()> {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let State::Idle(jobs) = &mut *s else { return Ok(()) };
    let (tx, mut rx) = mpsc::unbounded_channel();
    for j in jobs.drain(..) {
        let _ = tx.send(j);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("selvedge-upstreams".into()).spawn(move || {
        rt.block_on(async move {
            while let Some(job) = rx.recv().await {
                if job.shared.strong_count() == 0 {
                    continue;
                }
                if let (Some(check), Some(probe)) = (job.cfg.health.clone(), job.probe.clone()) {
                    tokio::spawn(checks(job.shared.clone(), check, probe));
                }
                if let Some(every) = job.cfg.resolve.filter(|_| job.cfg.targets.iter().any(super::Target::is_name)) {
                    tokio::spawn(re_resolve(job.shared, job.cfg, every));
                }
            }
        });
    })?;
    *s = State::Running(tx);
    Ok(())
}

/// Active checks of one pool, until it is gone.
async fn checks(shared: Weak<Shared>, check: HealthCheck, probe: Probe) {
    let mut tick = interval_at(Instant::now(), check.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut streaks: HashMap<usize, Streak> = HashMap::new();
    loop {
        tick.tick().await;
        let Some(members) = shared.upgrade().map(|s| s.members.load_full()) else { return };
        let mut running = tokio::task::JoinSet::new();
        for (i, e) in members.endpoints.iter().enumerate() {
            let fut = probe(e.clone());
            let limit = check.timeout;
            running.spawn(async move { (i, tokio::time::timeout(limit, fut).await) });
        }
        while let Some(done) = running.join_next().await {
            let Ok((i, r)) = done else { continue };
            let e = &members.endpoints[i];
            let (ok, why) = match r {
                Ok(Ok(s)) => (check.expect.admits(s), format!("GET {} answered {s}", check.path)),
                Ok(Err(why)) => (false, format!("GET {}: {why}", check.path)),
                Err(_) => (false, format!("GET {}: no answer within {:?}", check.path, check.timeout)),
            };
            let st = streaks.entry(e.slot).or_insert_with(|| Streak::starting(!e.health.actively_down()));
            if let Some(up) = st.record(ok, check.healthy, check.unhealthy) {
                e.health.set_active(up, &why);
            }
        }
        streaks.retain(|slot, _| members.endpoints.iter().any(|e| e.slot == *slot));
    }
}

/// Re-resolution of one pool's host names, until it is gone.
async fn re_resolve(shared: Weak<Shared>, cfg: Arc<PoolConfig>, every: std::time::Duration) {
    let mut tick = interval_at(Instant::now() + every, every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(sh) = shared.upgrade() else { return };
        let mut targets = sh.targets.lock().unwrap_or_else(|e| e.into_inner()).clone();
        drop(sh);
        let asks: Vec<Option<(String, u16)>> =
            targets.iter().map(|t| t.is_name().then(|| (t.host.clone().unwrap_or_default(), t.port))).collect();
        let resolver = cfg.resolver.clone();
        let answers = tokio::task::spawn_blocking(move || {
            asks.into_iter().map(|a| a.map(|(h, p)| dns::resolve(&h, p, &resolver))).collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut changed = false;
        for (t, answer) in targets.iter_mut().zip(answers) {
            let host = t.host.as_deref().unwrap_or_default();
            let old = match &t.addrs {
                Addr::Tcp(v) => v.clone(),
                Addr::Unix(_) => continue,
            };
            match answer {
                None => {}
                Some(Ok(new)) if new.is_empty() => {
                    tracing::warn!("upstream {}: {host} resolves to no address now; keeping {old:?}", t.url);
                }
                Some(Ok(mut new)) => {
                    new.sort();
                    let mut was = old.clone();
                    was.sort();
                    if new != was {
                        tracing::info!("upstream {}: {host} now resolves to {new:?} (was {was:?})", t.url);
                        t.addrs = Addr::Tcp(new);
                        changed = true;
                    }
                }
                Some(Err(e)) => tracing::warn!("upstream {}: cannot resolve {host}: {e}; keeping {old:?}", t.url),
            }
        }
        if changed {
            let Some(sh) = shared.upgrade() else { return };
            let members = Members::build(&targets, cfg.policy);
            sh.members.store(Arc::new(members));
            *sh.targets.lock().unwrap_or_else(|e| e.into_inner()) = targets;
            sh.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }
}
