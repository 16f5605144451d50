//! On-demand TLS: a certificate for a name not known in advance, obtained while the first
//! client's handshake waits (a listener's `on_demand = { ask = ... }`).
//!
//! The certificate is obtained *during* the handshake, as Caddy does, not after it: the
//! first visitor of a new custom domain gets a working page instead of a failed handshake
//! and a retry later. The wait counts against `tls_handshake_timeout`; the order itself
//! runs in its own task on the control runtime, so a client that gives up does not cancel
//! it, and the next handshake finds the certificate.
//!
//! For a handshake naming no certificate of the listener:
//! 1. A name that already has a task (obtained, or being obtained) waits for it.
//! 2. A certificate in the storage (obtained on demand before a restart) is served, with no
//!    question asked: it was allowed when it was ordered, and it is renewed as usual.
//! 3. A name refused by `ask` within [`REFUSAL_TTL`] is refused at once.
//! 4. `GET ask?domain=NAME` ([`ASKS_AT_ONCE`] at a time, within [`ASK_TIMEOUT`]): 200
//!    allows the name, any other status refuses it (remembered), no answer refuses this
//!    handshake only.
//! 5. An allowed name is ordered if the listener's `rate` and `max_certificates` allow,
//!    by a task like a configured host's: the same storage, locks, retries and renewal.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;

use super::config::OnDemandConfig;
use super::{log, run, Shared, Spec};

/// How long a name `ask` refused is refused without asking again.
pub const REFUSAL_TTL: Duration = Duration::from_secs(600);
/// The most refused names remembered per listener.
pub const MAX_REFUSALS: usize = 10_000;
/// The most `ask` requests out at once per listener; other handshakes wait their turn.
pub const ASKS_AT_ONCE: usize = 16;
/// How long `ask` may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting handshake looks for its certificate…
const WAIT_POLL: Duration = Duration::from_millis(25);
/// …and for a failure of its order.
const FAILURE_POLL: Duration = Duration::from_millis(500);

/// One listener's on-demand state: its `ask`, refusals and order rate.
pub(super) struct OnDemand {
    cfg: OnDemandConfig,
    asks: tokio::sync::Semaphore,
    http: crate::outbound::HttpClient<Empty<Bytes>>,
    state: Mutex<State>,
}

/// Takes a name off the list of names being asked about, however the question ends.
struct Asking<'a> {
    od: &'a OnDemand,
    name: &'a str,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.od.state().asking.remove(self.name);
    }
}

#[derive(Default)]
struct State {
    /// Names being asked about now.
    asking: std::collections::HashSet<String>,
    /// Names `ask` refused, and until when that holds.
    refused: HashMap<String, Instant>,
    /// When the orders within the last `per` started.
    orders: VecDeque<Instant>,
}

impl OnDemand {
    pub(super) fn new(cfg: OnDemandConfig) -> Result<OnDemand, String> {
        let http = crate::outbound::client()?;
        Ok(OnDemand { cfg, asks: tokio::sync::Semaphore::new(ASKS_AT_ONCE), http, state: Mutex::new(State::default()) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refused(&self, name: &str) -> bool {
        let mut st = self.state();
        match st.refused.get(name) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                st.refused.remove(name);
                false
            }
            None => false,
        }
    }

    fn refuse(&self, name: &str) {
        let now = Instant::now();
        let mut st = self.state();
        if st.refused.len() >= MAX_REFUSALS {
            st.refused.retain(|_, until| *until > now);
            if st.refused.len() >= MAX_REFUSALS {
                // Full of live refusals: forget the one nearest its end.
                if let Some(k) = st.refused.iter().min_by_key(|(_, until)| **until).map(|(k, _)| k.clone()) {
                    st.refused.remove(&k);
                }
            }
        }
        st.refused.insert(name.to_string(), now + REFUSAL_TTL);
    }

    /// Takes one order from the rate, if it has one left.
    fn take_order(&self) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        while st.orders.front().is_some_and(|t| now.duration_since(*t) >= self.cfg.per) {
            st.orders.pop_front();
        }
        if st.orders.len() >= self.cfg.rate as usize {
            return false;
        }
        st.orders.push_back(now);
        true
    }

    /// `Ok(true)`: `ask` answered 200 for `name`; `Ok(false)`: another status.
    async fn ask(&self, name: &str) -> Result<bool, String> {
        let sep = if self.cfg.ask.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}domain={name}", self.cfg.ask);
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let req = http::Request::get(uri)
            .header(http::header::USER_AGENT, concat!("selvedge/", env!("CARGO_PKG_VERSION"), " on-demand-tls"))
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(ASK_TIMEOUT, self.http.request(req)).await {
            Ok(Ok(resp)) => Ok(resp.status() == http::StatusCode::OK),
            Ok(Err(e)) => Err(format!("{url}: {e}")),
            Err(_) => Err(format!("{url}: no answer within {}s", ASK_TIMEOUT.as_secs())),
        }
    }
}

/// Starts the task keeping `name`'s certificate, unless it has one or the listener's
/// `max_certificates` is reached (`false`).
fn start_task(sh: &Arc<Shared>, od: &OnDemand, name: &str) -> bool {
    let Some(rt) = sh.rt.get() else { return false };
    let mut tasks = sh.on_demand_tasks.lock().unwrap_or_else(|p| p.into_inner());
    if tasks.contains_key(name) {
        return true;
    }
    if tasks.len() >= od.cfg.max_certificates as usize {
        log(format_args!(
            "on-demand: {name}: not obtained, {} certificates obtained on demand already (max_certificates)",
            tasks.len()
        ));
        return false;
    }
    let spec = Spec { id: super::spec_id(name), names: vec![name.to_string()] };
    tasks.insert(name.to_string(), rt.spawn(run(sh.clone(), spec)).abort_handle());
    true
}

/// Waits until `name` has a certificate, or its order failed (its failure count passed
/// `failures`). The handshake's own timeout ends the wait otherwise. The certificate is
/// looked for in memory every [`WAIT_POLL`]; the storage's retry state only every
/// [`FAILURE_POLL`].
async fn wait(sh: &Shared, name: &str, failures: u32) {
    let id = super::spec_id(name);
    let mut last_look = Instant::now();
    loop {
        if sh.managed.has_cert(&id) {
            return;
        }
        if last_look.elapsed() >= FAILURE_POLL {
            last_look = Instant::now();
            if sh.storage.load_retry(&id).is_some_and(|r| r.failures > failures) {
                return;
            }
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// Whether `id`'s last order failed and its next attempt is still ahead: its handshakes
/// fail at once until then, as the log line of the failure says.
fn failing(sh: &Shared, id: &str) -> bool {
    sh.storage.load_retry(id).is_some_and(|r| r.retry_time() > std::time::SystemTime::now())
}

/// A handshake for `name`, which no certificate of the listener covers (see the module
/// documentation).
pub(super) async fn handshake(sh: Arc<Shared>, od: Arc<OnDemand>, name: String) {
    if super::config::check_host(&name).is_err() || name.starts_with("*.") {
        return;
    }
    let id = super::spec_id(&name);
    let failures = sh.storage.load_retry(&id).map_or(0, |r| r.failures);
    let known = sh.on_demand_tasks.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&name);
    if known {
        if failing(&sh, &id) {
            return;
        }
        return wait(&sh, &name, failures).await;
    }
    let spec = Spec { id: id.clone(), names: vec![name.clone()] };
    if sh.stored(&spec).is_some() {
        if start_task(&sh, &od, &name) {
            wait(&sh, &name, failures).await;
        }
        return;
    }
    if od.refused(&name) {
        return;
    }
    // One question per name at a time: a handshake for a name being asked about waits for
    // that answer, then looks again.
    if !od.state().asking.insert(name.clone()) {
        while od.state().asking.contains(&name) {
            tokio::time::sleep(WAIT_POLL).await;
        }
        let known = sh.on_demand_tasks.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&name);
        if known {
            wait(&sh, &name, failures).await;
        }
        return;
    }
    // Held until the order's task is started (or the name refused), so that the handshakes
    // waiting above find either.
    let asking = Asking { od: &od, name: &name };
    let allowed = {
        let Ok(_turn) = od.asks.acquire().await else { return };
        od.ask(&name).await
    };
    match allowed {
        Ok(true) => {}
        Ok(false) => {
            log(format_args!(
                "on-demand: {name}: refused by ask (not 200); refused without asking for {}s",
                REFUSAL_TTL.as_secs()
            ));
            od.refuse(&name);
            return;
        }
        Err(e) => {
            log(format_args!("error: on-demand: {name}: ask failed: {e}; this handshake is refused"));
            return;
        }
    }
    // Another handshake for the name may have started its order while this one asked.
    let known = sh.on_demand_tasks.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&name);
    if !known {
        if !od.take_order() {
            log(format_args!(
                "on-demand: {name}: not obtained, {} orders in the last {}s already (rate)",
                od.cfg.rate,
                od.cfg.per.as_secs()
            ));
            return;
        }
        log(format_args!("on-demand: {name}: allowed by ask; obtaining a certificate while the handshake waits"));
    }
    let started = start_task(&sh, &od, &name);
    drop(asking);
    if started {
        wait(&sh, &name, failures).await;
    }
}

/// The tasks of names obtained on demand, by name.
pub(super) type Tasks = Mutex<HashMap<String, tokio::task::AbortHandle>>;
