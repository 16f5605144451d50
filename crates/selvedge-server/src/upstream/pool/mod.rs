//! Upstream pools: which upstream a proxied request goes to, and whether to try another.
//!
//! A proxy route's `upstreams` form a [`Pool`]. Each upstream URL resolves to one or more
//! addresses; each address is a member ([`Endpoint`]) with the URL's weight, its own
//! health ([`Health`]) and its own connection-pool slot. The proxy asks the pool for a
//! member ([`Pool::pick`]), talks to it through its transport, and reports how it went
//! ([`Picked::failed`], [`Picked::succeeded`]); the pool decides whether another may be
//! tried ([`Pool::may_retry`]).
//!
//! **No lock on the request path.** The members live in an [`ArcSwap`] that changes only
//! when DNS answers change. Each worker thread keeps its own view of every pool it serves
//! (thread-local: the members, round-robin scores, requests in flight, the retry budget)
//! and renews it when the pool's generation counter moves; health is a few atomics per
//! member, shared by all workers, written only when something fails or recovers.
//!
//! **Background work** (active health checks, re-resolution) runs on one maintenance
//! thread ([`start_maintenance`]), never on the workers; see `maintain.rs`.
//!
//! The parts: `balance` (the policies, sans-IO), `health` (passive and active state),
//! `budget` (the retry budget), `dns` (resolution), `maintain` (the maintenance thread).

pub mod balance;
mod budget;
pub mod dns;
mod health;
mod maintain;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use selvedge::time::now_ms;
use selvedge::Request;
use serde::Deserialize;

pub use balance::Policy;
use balance::{Counters, Maglev};
use budget::Budget;
pub use dns::Resolver;
pub use health::{Health, Passive};
pub use maintain::{start_maintenance, Probe, ProbeFuture};

use crate::units::{Count, NonZeroDur};
pub use crate::upstream::transport::Addr;

/// One entry of `upstreams`: a URL, or a table with its weight.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawUpstream {
    /// `"http://10.0.0.1:9000"`.
    Url(String),
    /// `{ url = "...", weight = 3 }`.
    Weighted {
        /// The URL.
        url: String,
        /// Its share (1 by default).
        weight: Option<Count<1, 10_000>>,
    },
}

impl RawUpstream {
    /// The URL and weight.
    pub fn parts(&self) -> (&str, u32) {
        match self {
            RawUpstream::Url(u) => (u, 1),
            RawUpstream::Weighted { url, weight } => (url, weight.map_or(1, Count::get_u32)),
        }
    }
}

/// `health = { ... }` as written.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    path: Option<String>,
    interval: Option<NonZeroDur>,
    timeout: Option<NonZeroDur>,
    healthy: Option<Count<1, 1000>>,
    unhealthy: Option<Count<1, 1000>>,
    expect: Option<toml::Value>,
}

/// What a check's status must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Exactly this status.
    Status(u16),
    /// Any status of this class (`"2xx"`: 2).
    Class(u16),
}

impl Expect {
    /// Whether `status` passes.
    pub fn admits(self, status: u16) -> bool {
        match self {
            Expect::Status(s) => status == s,
            Expect::Class(c) => status / 100 == c,
        }
    }
}

/// Active health checks of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Path requested (`GET`, with the upstream's `Host`): `/`.
    pub path: String,
    /// Time between checks of a member: 5 s.
    pub interval: Duration,
    /// Time a check may take (connect to the end of the response head): 2 s.
    pub timeout: Duration,
    /// Passing checks in a row that bring a failed member back: 2.
    pub healthy: u32,
    /// Failing checks in a row that take a member out: 3.
    pub unhealthy: u32,
    /// The status a passing check answers: 200.
    pub expect: Expect,
}

impl HealthCheck {
    /// Checks `raw`.
    ///
    /// # Errors
    /// A path that is not absolute, or an `expect` that is not a status or a class.
    pub fn from_raw(raw: &RawHealth) -> Result<HealthCheck, String> {
        let path = raw.path.clone().unwrap_or_else(|| "/".into());
        if !path.starts_with('/') || !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("health path {path:?}: an absolute path without spaces"));
        }
        let bad = || "health expect: a status (200) or a class (\"2xx\")".to_string();
        let expect = match &raw.expect {
            None => Expect::Status(200),
            Some(toml::Value::Integer(n)) if (100..600).contains(n) => Expect::Status(*n as u16),
            Some(toml::Value::String(s)) => match s.as_bytes() {
                [c @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => Expect::Class(u16::from(c - b'0')),
                _ => s.parse::<u16>().ok().filter(|n| (100..600).contains(n)).map(Expect::Status).ok_or_else(bad)?,
            },
            Some(_) => return Err(bad()),
        };
        Ok(HealthCheck {
            path,
            interval: raw.interval.map_or(Duration::from_secs(5), NonZeroDur::get),
            timeout: raw.timeout.map_or(Duration::from_secs(2), NonZeroDur::get),
            healthy: raw.healthy.map_or(2, Count::get_u32),
            unhealthy: raw.unhealthy.map_or(3, Count::get_u32),
            expect,
        })
    }
}

/// What a request is hashed on (`hash_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's address ([`crate::client::client_ip`]).
    ClientIp,
    /// A request field's value (`"header:X-User"`; the name lower case).
    Header(String),
    /// A cookie's value (`"cookie:session_id"`).
    Cookie(String),
}

impl HashKey {
    /// Parses `client_ip`, `header:NAME` or `cookie:NAME`.
    ///
    /// # Errors
    /// Anything else.
    pub fn parse(s: &str) -> Result<HashKey, String> {
        let token =
            |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        match s.split_once(':') {
            None if s == "client_ip" => Ok(HashKey::ClientIp),
            Some(("header", n)) if token(n) => Ok(HashKey::Header(n.to_ascii_lowercase())),
            Some(("cookie", n)) if token(n) => Ok(HashKey::Cookie(n.to_string())),
            _ => Err(format!("hash_key {s:?}: \"client_ip\", \"header:NAME\" or \"cookie:NAME\"")),
        }
    }

    /// The hash of `req`'s key (`None`: the request has none; it is balanced by round robin).
    pub fn hash(&self, req: &Request) -> Option<u64> {
        let h = |b: &[u8]| balance::hash_bytes(b, 0);
        match self {
            HashKey::ClientIp => match crate::client::client_ip(req)? {
                std::net::IpAddr::V4(a) => Some(h(&a.octets())),
                std::net::IpAddr::V6(a) => Some(h(&a.octets())),
            },
            HashKey::Header(n) => req.header(n).map(h),
            HashKey::Cookie(n) => req
                .header_bytes()
                .filter(|(k, _)| k.eq_ignore_ascii_case(b"cookie"))
                .flat_map(|(_, v)| v.split(|&b| b == b';'))
                .find_map(|c| {
                    let c = c.trim_ascii();
                    let (k, v) = (c.get(..n.len())?, c.get(n.len()..)?);
                    (k == n.as_bytes() && v.first() == Some(&b'=')).then(|| h(&v[1..]))
                }),
        }
    }
}

/// One upstream URL of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// As written.
    pub url: String,
    /// Its share of requests, for each of its addresses.
    pub weight: u32,
    /// The host to resolve (`None`: a Unix socket).
    pub host: Option<String>,
    /// The TCP port.
    pub port: u16,
    /// Its addresses now (TCP, from the last resolution), or its socket.
    pub addrs: Addr,
}

impl Target {
    /// Whether its host is a name (re-resolved with `resolve`), not an address.
    pub fn is_name(&self) -> bool {
        self.host.as_deref().is_some_and(|h| h.parse::<std::net::IpAddr>().is_err())
    }
}

/// A pool's settings (keys of the proxy table; every default is on its field).
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The upstreams.
    pub targets: Vec<Target>,
    /// `balance`: `round_robin`.
    pub policy: Policy,
    /// `hash_key`: `client_ip` (with `balance = "hash"`).
    pub hash_key: HashKey,
    /// `health`: no active checks.
    pub health: Option<HealthCheck>,
    /// `max_fails` 3 within `fail_timeout` 10 s.
    pub passive: Passive,
    /// `fail_status`: upstream answers that count as failures: 502, 503, 504.
    pub fail_status: Vec<u16>,
    /// `retries`: other members an idempotent request may go to after a failure: 1.
    pub retries: u32,
    /// `retry_budget`: retries stay below this fraction of requests: 0.2.
    pub retry_budget: f64,
    /// `retry_budget_min`: retries per second always allowed (per worker): 10.
    pub retry_budget_min: u32,
    /// `resolve`: re-resolve host names this often (`None`: only at load).
    pub resolve: Option<Duration>,
    /// `[server] resolver`: how names are resolved.
    pub resolver: Resolver,
}

/// A member: one address of one upstream.
#[derive(Debug)]
pub struct Endpoint {
    /// Its number in this process, for its URL and address: the connection-pool slot,
    /// and its identity across reloads and re-resolutions.
    pub slot: usize,
    /// Its upstream (index into [`PoolConfig::targets`]).
    pub target: usize,
    /// Where it is.
    pub addr: Addr,
    /// Its address as the access log and metrics name it (`ip:port`, `unix:PATH`).
    pub label: Arc<str>,
    /// Its weight.
    pub weight: u32,
    /// Health, shared with every pool that has the same member.
    pub health: Arc<Health>,
}

/// The members of a pool at one time.
#[derive(Debug)]
pub struct Members {
    /// Every member, in order of upstream then address.
    pub endpoints: Vec<Arc<Endpoint>>,
    weights: Vec<u32>,
    maglev: Option<Maglev>,
}

impl Members {
    /// The members for `targets` (health and slots shared with earlier builds).
    fn build(targets: &[Target], policy: Policy) -> Members {
        let mut endpoints = Vec::new();
        let mut names = Vec::new();
        for (t_i, t) in targets.iter().enumerate() {
            let addrs: Vec<Addr> = match &t.addrs {
                Addr::Unix(p) => vec![Addr::Unix(p.clone())],
                Addr::Tcp(v) => v.iter().map(|a| Addr::Tcp(vec![*a])).collect(),
            };
            for addr in addrs {
                let key = match &addr {
                    Addr::Tcp(a) if t.is_name() => format!("{} ({})", t.url, a[0]),
                    _ => t.url.clone(),
                };
                let slot = slot_of(&key);
                let label: Arc<str> = match &addr {
                    Addr::Tcp(a) => a[0].to_string().into(),
                    Addr::Unix(p) => format!("unix:{}", p.display()).into(),
                };
                endpoints.push(Arc::new(Endpoint {
                    slot,
                    target: t_i,
                    addr,
                    label,
                    weight: t.weight,
                    health: health_of(slot, &key),
                }));
                names.push(key);
            }
        }
        let weights: Vec<u32> = endpoints.iter().map(|e| e.weight).collect();
        let maglev = if policy == Policy::Hash {
            Maglev::build(&names.iter().map(String::as_str).collect::<Vec<_>>(), &weights)
        } else {
            None
        };
        Members { endpoints, weights, maglev }
    }
}

/// The slot number of member `key` (when a pool is built, not per request): its slot in
/// the per-worker connection pools (`transport::idle`), numbered once per process for every
/// backend, so each member has its own idle connections and connection limit.
fn slot_of(key: &str) -> usize {
    crate::upstream::transport::idle::slot_of(key)
}

/// Health records of live members, by slot: a reload or re-resolution that keeps a
/// member keeps what is known of its health.
static HEALTH: Mutex<Vec<Weak<Health>>> = Mutex::new(Vec::new());

fn health_of(slot: usize, name: &str) -> Arc<Health> {
    let mut all = HEALTH.lock().unwrap_or_else(|e| e.into_inner());
    if all.len() <= slot {
        all.resize_with(slot + 1, Weak::new);
    }
    if let Some(h) = all[slot].upgrade() {
        return h;
    }
    let h = Arc::new(Health::new(name.to_string()));
    all[slot] = Arc::downgrade(&h);
    h
}

/// Every live member's name and whether it may take requests now (`false`: passive
/// marking or active checks hold it down), for `/metrics`; by name, each once.
pub fn health_states() -> Vec<(String, bool)> {
    let now = now_ms();
    let all = HEALTH.lock().unwrap_or_else(|e| e.into_inner());
    let mut out: Vec<(String, bool)> =
        all.iter().filter_map(Weak::upgrade).map(|h| (h.name().to_string(), h.usable(now))).collect();
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// What the workers and the maintenance thread share of a pool.
#[derive(Debug)]
struct Shared {
    members: ArcSwap<Members>,
    /// Bumped after `members` changes: workers renew their views.
    generation: AtomicU64,
    /// The targets' current addresses (the maintenance thread's copy).
    targets: Mutex<Vec<Target>>,
}

/// A proxy route's upstreams.
#[derive(Debug)]
pub struct Pool {
    /// Which view of each worker is this pool's (one per process per pool key).
    view: usize,
    /// Tells this pool from an earlier one with the same key (after a reload).
    uid: u64,
    cfg: Arc<PoolConfig>,
    shared: Arc<Shared>,
}

/// View slots by pool key.
static VIEW_SLOTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl Pool {
    /// The pool for `cfg`; `key` names it across reloads (the route). Background work
    /// (checks, re-resolution) starts with [`start_maintenance`]; `probe` runs one check.
    pub fn new(cfg: PoolConfig, key: &str, probe: Option<Probe>) -> Pool {
        static UID: AtomicU64 = AtomicU64::new(1);
        let view = {
            let mut keys = VIEW_SLOTS.lock().unwrap_or_else(|e| e.into_inner());
            keys.iter().position(|k| k == key).unwrap_or_else(|| {
                keys.push(key.to_string());
                keys.len() - 1
            })
        };
        let members = Members::build(&cfg.targets, cfg.policy);
        let shared = Arc::new(Shared {
            members: ArcSwap::from_pointee(members),
            generation: AtomicU64::new(0),
            targets: Mutex::new(cfg.targets.clone()),
        });
        let cfg = Arc::new(cfg);
        let pool = Pool { view, uid: UID.fetch_add(1, Ordering::Relaxed), cfg, shared };
        let needs_dns = pool.cfg.resolve.is_some() && pool.cfg.targets.iter().any(Target::is_name);
        if needs_dns || (pool.cfg.health.is_some() && probe.is_some()) {
            maintain::register(Arc::downgrade(&pool.shared), pool.cfg.clone(), probe);
        }
        pool
    }

    /// The settings.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// The members now.
    pub fn members(&self) -> Arc<Members> {
        self.shared.members.load_full()
    }

    /// A new request's attempts.
    pub fn attempts(&self, req: &Request) -> Attempts {
        let key = if self.cfg.policy == Policy::Hash { self.cfg.hash_key.hash(req) } else { None };
        Attempts { tried: Tried::default(), retries_left: self.cfg.retries, key }
    }

    /// The member for the next attempt: by the policy among the usable members not tried
    /// yet; when none is usable, the untried one that failed least recently. `None`: every
    /// member was tried (or the pool is empty).
    pub fn pick(&self, a: &mut Attempts) -> Option<Picked> {
        let now = now_ms();
        let generation = self.shared.generation.load(Ordering::Acquire);
        VIEWS.with(|v| {
            let mut views = v.borrow_mut();
            let view = self.view_of(&mut views, generation);
            if a.tried.is_empty() {
                view.budget.request(now);
            }
            let m = &*view.members;
            let eps = &m.endpoints;
            let untried = |i: usize| !a.tried.contains(&eps[i].slot);
            let usable = |i: usize| untried(i) && eps[i].health.usable(now);
            let c = &mut view.counters;
            let i = match self.cfg.policy {
                Policy::RoundRobin => c.round_robin(&m.weights, usable),
                Policy::LeastConn => c.least_conn(&m.weights, usable),
                Policy::RandomTwo => c.random_two(&m.weights, usable),
                Policy::Hash => match (&m.maglev, a.key) {
                    (Some(t), Some(k)) => t.lookup(k, usable).or_else(|| c.round_robin(&m.weights, usable)),
                    _ => c.round_robin(&m.weights, usable),
                },
            };
            // Everything is down: the one that failed longest ago gets a chance.
            let i = i.or_else(|| (0..eps.len()).filter(|&i| untried(i)).min_by_key(|&i| eps[i].health.last_fail()))?;
            let ep = eps[i].clone();
            a.tried.push(ep.slot);
            let counted = matches!(self.cfg.policy, Policy::LeastConn | Policy::RandomTwo);
            if counted {
                c.inflight[i] += 1;
            }
            Some(Picked { ep, passive: self.cfg.passive, counted: counted.then_some((self.view, self.uid)) })
        })
    }

    /// Whether another attempt may follow a failed one: retries left, and the retry
    /// budget allows it (counted if so).
    pub fn may_retry(&self, a: &mut Attempts) -> bool {
        if a.retries_left == 0 {
            return false;
        }
        let now = now_ms();
        let generation = self.shared.generation.load(Ordering::Acquire);
        let ok = VIEWS.with(|v| {
            let mut views = v.borrow_mut();
            let view = self.view_of(&mut views, generation);
            view.budget.try_retry(now, self.cfg.retry_budget, self.cfg.retry_budget_min)
        });
        if ok {
            a.retries_left -= 1;
        } else {
            tracing::debug!("retry refused by the retry budget");
        }
        ok
    }

    /// Whether an upstream's answer with `status` counts as a failure.
    #[inline]
    pub fn fails_on(&self, status: u16) -> bool {
        status >= 500 && self.cfg.fail_status.contains(&status)
    }

    /// This worker's view of the pool, renewed if the pool or its members changed.
    fn view_of<'a>(&self, views: &'a mut Vec<Option<View>>, generation: u64) -> &'a mut View {
        let views_at = std::ptr::from_ref(views) as u64;
        if views.len() <= self.view {
            views.resize_with(self.view + 1, || None);
        }
        let slot = &mut views[self.view];
        let fresh = matches!(slot, Some(v) if v.uid == self.uid && v.generation == generation);
        if !fresh {
            let members = self.shared.members.load_full();
            let n = members.endpoints.len();
            // Each worker its own random sequence: seeded by where its views live.
            let seed = balance::hash_bytes(&(views_at ^ self.uid ^ now_ms().rotate_left(32)).to_le_bytes(), 1);
            let mut counters = Counters::new(n, seed);
            let mut budget = Budget::default();
            if let Some(old) = slot.take() {
                // Requests in flight stay counted on the members that remain.
                for (i, e) in members.endpoints.iter().enumerate() {
                    if let Some(j) = old.members.endpoints.iter().position(|o| o.slot == e.slot) {
                        counters.inflight[i] = old.counters.inflight[j];
                    }
                }
                if old.uid == self.uid {
                    budget = old.budget;
                }
            }
            *slot = Some(View { uid: self.uid, generation, members, counters, budget });
        }
        slot.as_mut().expect("set above")
    }
}

/// A worker's view of one pool.
struct View {
    uid: u64,
    generation: u64,
    members: Arc<Members>,
    counters: Counters,
    budget: Budget,
}

thread_local! {
    static VIEWS: RefCell<Vec<Option<View>>> = const { RefCell::new(Vec::new()) };
}

/// One request's attempts so far.
#[derive(Debug)]
pub struct Attempts {
    /// Slots of the members tried.
    tried: Tried,
    retries_left: u32,
    /// The request's hash (hash policy).
    key: Option<u64>,
}

impl Attempts {
    /// How many members were tried.
    pub fn count(&self) -> usize {
        self.tried.len()
    }
}

/// The slots of the members a request tried: the first few in place (most requests try
/// one, and a vector would be allocated for it), more in a vector.
#[derive(Debug, Default)]
struct Tried {
    first: [usize; Tried::IN_PLACE],
    n: usize,
    more: Vec<usize>,
}

impl Tried {
    const IN_PLACE: usize = 4;

    fn len(&self) -> usize {
        self.n
    }

    fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn contains(&self, slot: &usize) -> bool {
        self.first[..self.n.min(Self::IN_PLACE)].contains(slot) || self.more.contains(slot)
    }

    fn push(&mut self, slot: usize) {
        if self.n < Self::IN_PLACE {
            self.first[self.n] = slot;
        } else {
            self.more.push(slot);
        }
        self.n += 1;
    }
}

/// A member chosen for an attempt. Counted as in flight (least connections, power of two
/// choices) until dropped.
#[derive(Debug)]
pub struct Picked {
    /// The member.
    pub ep: Arc<Endpoint>,
    passive: Passive,
    /// (view, pool uid) where it is counted in flight.
    counted: Option<(usize, u64)>,
}

impl Picked {
    /// The attempt failed (`why`, for the log).
    pub fn failed(&self, why: &str) {
        tracing::debug!(upstream = self.ep.health.name(), "upstream attempt failed: {why}");
        self.ep.health.failed(now_ms(), &self.passive, why);
    }

    /// The attempt got an answer.
    #[inline]
    pub fn succeeded(&self) {
        self.ep.health.succeeded();
    }
}

impl Drop for Picked {
    fn drop(&mut self) {
        let Some((view, uid)) = self.counted else { return };
        let slot = self.ep.slot;
        // On another thread (multi-threaded runtime) this finds another view, or none: the
        // counts are approximate there, never negative.
        let _ = VIEWS.try_with(|v| {
            if let Ok(mut views) = v.try_borrow_mut() {
                if let Some(Some(v)) = views.get_mut(view).filter(|v| v.as_ref().is_some_and(|v| v.uid == uid)) {
                    if let Some(i) = v.members.endpoints.iter().position(|e| e.slot == slot) {
                        v.counters.inflight[i] = v.counters.inflight[i].saturating_sub(1);
                    }
                }
            }
        });
    }
}

/// Resolves every target's host at load (`resolver` as configured). With `resolve` set a
/// name that does not resolve yet is allowed (its member appears when it does).
///
/// # Errors
/// A name that cannot be resolved (without `resolve`), or resolves to nothing.
pub fn resolve_targets(targets: &mut [Target], resolver: &Resolver, tolerate: bool) -> Result<(), String> {
    for t in targets {
        let Some(host) = &t.host else { continue };
        match dns::resolve(host, t.port, resolver) {
            Ok(v) if !v.is_empty() => t.addrs = Addr::Tcp(v),
            Ok(_) if tolerate => tracing::warn!("upstream {}: {host} has no address yet", t.url),
            Err(e) if tolerate => tracing::warn!("upstream {}: cannot resolve {host} yet: {e}", t.url),
            Ok(_) => return Err(format!("upstream {:?}: {host} resolves to no address", t.url)),
            Err(e) => return Err(format!("upstream {:?}: cannot resolve {host}: {e}", t.url)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Tried;

    #[test]
    fn tried_slots_past_the_ones_kept_in_place() {
        let mut t = Tried::default();
        assert!(t.is_empty() && !t.contains(&0));
        for slot in [7, 3, 9, 1, 4, 8] {
            assert!(!t.contains(&slot));
            t.push(slot);
            assert!(t.contains(&slot));
        }
        assert_eq!(t.len(), 6);
        assert!(!t.contains(&0) && !t.contains(&2));
        assert_eq!(t.more, [4, 8]);
    }
}
