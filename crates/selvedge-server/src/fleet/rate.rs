//! `rate = { …, scope = "fleet" }`: a route's limit counted across the fleet, in Redis, by
//! the GCRA of [`crate::policy::rate`] (one theoretical arrival time per client, in µs of
//! the Redis server's clock, so the instances' clocks do not matter).
//!
//! Most requests need no round trip:
//! - **Leases.** An instance asks for up to `lease` admissions at once (the script moves
//!   the client's TAT by as many intervals as it grants) and spends them locally; an unused
//!   lease lapses after `per`. Leased admissions are counted when granted, so the fleet
//!   never admits more than the limit; at most `lease` per instance go unused.
//! - **Refusals.** A refusal carries the wait until the next admission; the instance
//!   refuses that client without asking until a lease's worth of admissions is due (the
//!   wait plus `lease − 1` intervals), so a client held at its limit costs one round trip
//!   per lease, not one per admission. While that round trip is under way, the client's
//!   other requests are refused. A grant that leaves the client less than a lease in
//!   Redis marks it at its limit too: no renewal, and once the lease is spent, refusals
//!   without asking until a whole lease is due again, so a client held at its limit costs
//!   one round trip per lease, the grant.
//! - **Renewals.** When a lease is down to half, one renewal is asked in the background
//!   (a task of its own), so a client below its limit rarely waits; a request that finds
//!   the lease spent while a round trip is out waits for its answer (at most `[fleet]
//!   timeout`) rather than send another.
//!
//! `lease` is the burst divided by four times the instances (at least 1, at most 1,024).
//!
//! When Redis does not answer within `[fleet] timeout`, the request is decided by the
//! local limiter with the limit (and burst) divided by `[fleet] instances` (default: the
//! live instances last seen), and so is every request while Redis is down
//! (`fleet::link`); `selvedge_fleet_rate_fallbacks` counts them. The round trip goes on
//! without the request: what Redis grants late is kept as a lease, less one if the local
//! limiter admitted the request. Every admission through Redis is also counted by the
//! local limiter (the shadow), so falling back does not start from a fresh burst.
//!
//! Memory: the local table holds at most `max_clients` entries (16 shards); a full shard
//! drops lapsed entries, and a client that finds it still full asks Redis every time.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;

use crate::policy::rate::{client_key, RateConfig, RateLimiter};

const SHARDS: usize = 16;

/// The most admissions one round trip leases.
const MAX_LEASE: u32 = 1024;

/// The GCRA step for `want` admissions at once: `{granted, wait_µs, left}` (`left`: how
/// many more the client could have now).
///
/// KEYS[1]: the client's TAT; ARGV: interval (µs), tolerance (µs), want.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local ahead = tat - now
if ahead > tolerance then return {0, ahead - tolerance, 0} end
local room = math.floor((tolerance - ahead) / interval) + 1
local n = room
if n > want then n = want end
tat = tat + n * interval
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
return {n, 0, room - n}
";

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(GCRA));

/// [`GCRA`] for key `name` on `c`: `{granted, wait_µs, left}`.
async fn gcra<C: redis::aio::ConnectionLike>(
    mut c: C,
    name: String,
    interval_us: u64,
    tolerance_us: u64,
    want: u32,
) -> redis::RedisResult<(u64, u64, u64)> {
    SCRIPT.key(name).arg(interval_us).arg(tolerance_us).arg(want).invoke_async(&mut c).await
}

#[derive(Debug, Clone, Default)]
struct Entry {
    /// Admissions left of the lease.
    lease: u32,
    /// When the lease lapses (ns since the limiter's epoch).
    lease_until: u64,
    /// Refused without asking until then.
    denied_until: u64,
    /// A round trip for this client is under way (since `asked_at`; one older than
    /// [`STALE_ASK`] is taken as lost).
    asking: bool,
    asked_at: u64,
    /// Until then the client is at its limit: the last answer left it less than a lease
    /// (or refused it), and no lease is due long since.
    limit_until: u64,
    /// Requests waiting for the round trip's answer, woken when it is kept.
    wake: Option<Arc<tokio::sync::Notify>>,
}

impl Entry {
    fn asking(&self, now: u64) -> bool {
        self.asking && now.saturating_sub(self.asked_at) < STALE_ASK
    }

    fn lapsed(&self, now: u64) -> bool {
        !self.asking(now) && (self.lease == 0 || now >= self.lease_until) && now >= self.denied_until
    }

    fn at_limit(&self, now: u64) -> bool {
        now < self.limit_until
    }

    fn start_asking(&mut self, now: u64) {
        self.asking = true;
        self.asked_at = now;
    }
}

/// A round trip older than this (ns) is taken as lost: longer than any call may take.
const STALE_ASK: u64 = 3_000_000_000;

/// How long a round trip may take in its task (a request waits `[fleet] timeout`
/// of it at most).
const BACKGROUND_LIMIT: Duration = Duration::from_secs(1);

/// A request's round trip: still waited for; given up and refused, or admitted, by the
/// local fallback; answered.
const WAITING: u8 = 0;
const GAVE_UP_REFUSED: u8 = 1;
const GAVE_UP_ADMITTED: u8 = 2;
const ANSWERED: u8 = 3;

/// What Redis answered: admissions granted and how many more the client could have had at
/// once, or the wait.
type Answer = Result<(u32, u32), Duration>;

/// Every route's fleet limiter, by route and settings, as [`RateLimiter::shared`] keeps the
/// local ones: a rebuilt site keeps the leases, remembered refusals and local fallback of
/// a route whose `rate` did not change.
static LIMITERS: Mutex<Vec<(String, RateConfig, std::sync::Weak<FleetLimiter>)>> = Mutex::new(Vec::new());

/// A route's fleet limit.
pub struct FleetLimiter {
    cfg: RateConfig,
    /// `{prefix}rate:{route}:`
    name: String,
    interval_us: u64,
    tolerance_us: u64,
    lease: u32,
    /// `[fleet] timeout` (ns): a round trip out longer is overdue.
    budget: u64,
    shards: Box<[Mutex<HashMap<u128, Entry>>]>,
    cap: usize,
    hash: RandomState,
    epoch: Instant,
    /// The local limiter used while Redis is unreachable, and the divisor it was made for.
    fallback: ArcSwapOption<(u32, RateLimiter)>,
}

impl std::fmt::Debug for FleetLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetLimiter").field("name", &self.name).field("lease", &self.lease).finish()
    }
}

/// The verdict without a round trip, or the round trip to make.
#[derive(Debug)]
pub enum Verdict {
    /// Admitted.
    Pass,
    /// Refused: wait this long.
    Refuse(Duration),
    /// Redis must be asked ([`FleetLimiter::ask`]).
    Ask(u128),
    /// Another request of the client is asking Redis: wait for its answer
    /// ([`FleetLimiter::ask`] with `wait`).
    Wait(u128),
}

/// What [`FleetLimiter::local`] decided, and whether a lease running low is to be renewed
/// in the background.
#[derive(Debug)]
struct Local {
    verdict: Verdict,
    refill: bool,
    /// A round trip for the client has been out longer than `[fleet] timeout`.
    overdue: bool,
}

impl FleetLimiter {
    /// The fleet limiter of `route` with `cfg`: the running one if there is one.
    pub fn shared(route: &str, cfg: &RateConfig) -> Arc<FleetLimiter> {
        let mut all = LIMITERS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(_, _, w)| w.strong_count() > 0);
        if let Some(l) = all.iter().find(|(r, c, _)| r == route && c == cfg).and_then(|(_, _, w)| w.upgrade()) {
            return l;
        }
        let l = Arc::new(FleetLimiter::new(route, cfg));
        all.push((route.to_string(), *cfg, Arc::downgrade(&l)));
        l
    }

    /// The fleet limit of `route` with `cfg`.
    pub fn new(route: &str, cfg: &RateConfig) -> FleetLimiter {
        let prefix = super::get().map_or("selvedge:", |f| f.cfg.prefix.as_str());
        let instances = super::get().and_then(|f| f.cfg.instances).unwrap_or(1).max(1);
        let interval = (cfg.per.as_micros() / u128::from(cfg.requests)).max(1);
        let interval_us = u64::try_from(interval).unwrap_or(u64::MAX);
        let tolerance_us = interval_us.saturating_mul(u64::from(cfg.burst.max(1)) - 1);
        let lease = (cfg.burst / (4 * instances)).clamp(1, MAX_LEASE);
        let cap = cfg.max_clients.div_ceil(SHARDS).max(1);
        FleetLimiter {
            cfg: *cfg,
            name: super::key(prefix, &format!("rate:{route}:")),
            interval_us,
            tolerance_us,
            lease,
            budget: super::get().map_or(5_000_000, |f| u64::try_from(f.cfg.timeout.as_nanos()).unwrap_or(u64::MAX)),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            cap,
            hash: RandomState::new(),
            epoch: Instant::now(),
            fallback: ArcSwapOption::empty(),
        }
    }

    /// A lease's worth of intervals (ns): how long a client at its limit stays so after the
    /// refusal or the short grant that said so expires. In a steady stream at the limit, its
    /// next round trip starts within that time, and the other requests arriving while it is
    /// out are refused instead of waiting for it; a client back after a pause has at least
    /// a lease more and waits for the answer instead.
    fn lease_ns(&self) -> u64 {
        self.interval_us.saturating_mul(u64::from(self.lease)).saturating_mul(1000)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn shard(&self, key: u128) -> &Mutex<HashMap<u128, Entry>> {
        &self.shards[self.hash.hash_one(key) as usize % SHARDS]
    }

    /// Decides without a round trip if it can: a lease (renewed in the background when it
    /// runs low), a remembered refusal, or the local limiter while Redis is unreachable.
    pub fn check(self: &Arc<Self>, ip: Option<IpAddr>) -> Verdict {
        let Some(f) = super::get().filter(|f| f.link.is_up()) else { return self.fall_back(ip) };
        self.decide(f, client_key(ip))
    }

    /// [`FleetLimiter::local`]'s verdict, with its renewal started.
    fn decide(self: &Arc<Self>, f: &super::Fleet, key: u128) -> Verdict {
        let l = self.local(key, self.now());
        if l.overdue {
            // Redis is slow or stalled, or the answer is on its way: the fleet thread's
            // ping decides which.
            f.link.suspect(f.link.timeout);
        }
        if l.refill {
            let me = self.clone();
            let own = f.link.own();
            let on_worker = own.is_some();
            let renew = async move {
                let answer = me.round_trip(key, own, BACKGROUND_LIMIT).await;
                me.record(key, answer, false);
            };
            if on_worker {
                tokio::spawn(renew);
            } else if let Some(rt) = f.link.runtime() {
                rt.spawn(renew);
            } else {
                self.record(key, None, false);
            }
        }
        l.verdict
    }

    /// Counts the admissions Redis granted this instance against the local fallback too
    /// (once per grant, where the answer is kept), so that the moment Redis goes away does not
    /// hand this instance a fresh burst (those over the fallback's limit change nothing:
    /// its debt is bounded by its burst).
    fn shadow(&self, key: u128, n: u32) {
        self.fallback_limiter().1.charge(key, n);
    }

    fn local(&self, key: u128, now: u64) -> Local {
        let mut s = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        let Some(e) = s.get_mut(&key) else { return self.asking(&mut s, key, now) };
        let asking = e.asking(now);
        let overdue = asking && now.saturating_sub(e.asked_at) > self.budget;
        if e.lease > 0 && now < e.lease_until {
            e.lease -= 1;
            let refill = !asking && !e.at_limit(now) && e.lease <= self.lease / 2 && now >= e.denied_until;
            if refill {
                e.start_asking(now);
            }
            return Local { verdict: Verdict::Pass, refill, overdue };
        }
        if now < e.denied_until {
            return Local {
                verdict: Verdict::Refuse(Duration::from_nanos(e.denied_until - now)),
                refill: false,
                overdue,
            };
        }
        if asking && e.at_limit(now) {
            // At the limit, with the round trip for its next admission under way: this one
            // would be refused there too.
            let wait = Duration::from_micros(self.interval_us);
            return Local { verdict: Verdict::Refuse(wait), refill: false, overdue };
        }
        if asking {
            // A round trip is on its way (a renewal, or the client's first): wait for it
            // rather than ask too (a crowd arriving at once would send a crowd of them).
            e.wake.get_or_insert_with(|| Arc::new(tokio::sync::Notify::new()));
            return Local { verdict: Verdict::Wait(key), refill: false, overdue };
        }
        e.start_asking(now);
        Local { verdict: Verdict::Ask(key), refill: false, overdue }
    }

    /// A first request from `key`: marked as asking (if the table has room).
    fn asking(&self, s: &mut HashMap<u128, Entry>, key: u128, now: u64) -> Local {
        if s.len() >= self.cap {
            s.retain(|_, e| !e.lapsed(now));
        }
        if s.len() < self.cap {
            s.insert(key, Entry { asking: true, asked_at: now, ..Entry::default() });
        }
        Local { verdict: Verdict::Ask(key), refill: false, overdue: false }
    }

    /// One GCRA step in Redis for `key`, for up to a lease, on the worker's own connection
    /// `own` or else a shared one: `None` without an answer in time.
    async fn round_trip(&self, key: u128, own: Option<MultiplexedConnection>, limit: Duration) -> Option<Answer> {
        let f = super::get()?;
        f.stats.rate_asks.fetch_add(1, Ordering::Relaxed);
        if own.is_some() {
            f.stats.rate_asks_on_workers.fetch_add(1, Ordering::Relaxed);
        }
        let name = format!("{}{key:032x}", self.name);
        let (iv, tol, want) = (self.interval_us, self.tolerance_us, self.lease);
        let (granted, wait_us, left) = match own {
            Some(c) => f.link.call_on(c, limit, |c| gcra(c, name, iv, tol, want)).await?,
            None => f.link.call(limit, |c| gcra(c, name, iv, tol, want)).await?,
        };
        Some(match granted {
            0 => Err(Duration::from_micros(wait_us.max(1))),
            // Never more than was asked for, whatever the reply says.
            n => Ok((u32::try_from(n).unwrap_or(u32::MAX).min(want), u32::try_from(left).unwrap_or(u32::MAX))),
        })
    }

    /// Keeps an answer: admissions added to the lease (less one, if a request waiting for
    /// it takes it), or the refusal remembered; the round trip is over either way.
    fn record(&self, key: u128, answer: Option<Answer>, take_one: bool) {
        let now = self.now();
        let mut s = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        let Some(e) = s.get_mut(&key) else { return };
        e.asking = false;
        if let Some(w) = e.wake.take() {
            w.notify_waiters();
        }
        match answer {
            Some(Ok((n, left))) => {
                if now >= e.lease_until {
                    e.lease = 0;
                }
                e.lease = e.lease.saturating_add(n - u32::from(take_one));
                e.lease_until = now.saturating_add(u64::try_from(self.cfg.per.as_nanos()).unwrap_or(u64::MAX));
                // Less than a lease left in Redis: the client is at its limit. No renewal
                // in the background, and once this lease is spent it is refused without
                // asking until a whole lease is due again (a renewal now would bring a
                // few admissions, and a round trip after the lease a refusal).
                e.limit_until = 0;
                if left < self.lease {
                    let due = self.interval_us.saturating_mul(u64::from(self.lease - left)).saturating_mul(1000);
                    e.denied_until = now.saturating_add(due);
                    e.limit_until = e.denied_until.saturating_add(self.lease_ns());
                }
            }
            Some(Err(wait)) => {
                // At its limit: asked again once a lease's worth is due, not each admission.
                let batch = Duration::from_micros(self.interval_us.saturating_mul(u64::from(self.lease - 1)));
                let until = wait.saturating_add(batch);
                e.denied_until = now.saturating_add(u64::try_from(until.as_nanos()).unwrap_or(u64::MAX));
                e.limit_until = e.denied_until.saturating_add(self.lease_ns());
            }
            None => {}
        }
        drop(s);
        // The shadow charge takes the fallback's own lock: not under this one.
        if let Some(Ok((n, _))) = answer {
            self.shadow(key, n);
        }
    }

    /// Asks Redis for client `key` (from [`Verdict::Ask`]): admitted, or how long to wait.
    /// Without an answer in time, the local limiter decides.
    ///
    /// # Errors
    /// Refused: the wait.
    pub async fn ask(self: Arc<Self>, key: u128, ip: Option<IpAddr>, wait: bool) -> Result<(), Duration> {
        let budget = super::get().map_or(Duration::from_millis(5), |f| f.link.timeout);
        let deadline = tokio::time::Instant::now() + budget;
        if wait {
            loop {
                match self.clone().wait_for_answer(key, deadline).await {
                    Some(Verdict::Pass) => return Ok(()),
                    Some(Verdict::Refuse(w)) => return Err(w),
                    Some(Verdict::Ask(_)) => break,
                    // The answer came and the requests ahead took the lease, and another
                    // round trip is out: wait for that one too, while the budget lasts.
                    Some(Verdict::Wait(_)) if tokio::time::Instant::now() < deadline => {}
                    Some(Verdict::Wait(_)) | None => return self.fall_back_check(ip),
                }
            }
        }
        // The round trip runs as a task of its own (on this worker, with its own
        // connection to Redis, or on the fleet thread) and records its answer, even if
        // this request is given up (a reset stream, a closed connection) or decided
        // locally (the answer is late) before it comes: the admissions Redis counted are
        // kept, less one for a request the local limiter admitted meanwhile.
        let Some(f) = super::get() else { return self.fall_back_check(ip) };
        let own = f.link.own();
        let on_worker = own.is_some();
        let Some(rt) = f.link.runtime() else {
            self.record(key, None, true);
            return self.fall_back_check(ip);
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let state = Arc::new(AtomicU8::new(WAITING));
        let (me, st) = (self.clone(), state.clone());
        let asked = std::time::Instant::now();
        let trip = async move {
            let began = std::time::Instant::now();
            let answer = me.round_trip(key, own, BACKGROUND_LIMIT).await;
            let was = st.swap(ANSWERED, Ordering::AcqRel);
            // Redis is judged by round trips as the fleet thread sees them: one on a worker
            // may have waited for the worker, busy with other requests, not for Redis. A
            // request that gave up waiting has had Redis judged already.
            if let Some(f) = super::get().filter(|_| answer.is_some()) {
                if began.elapsed() <= budget {
                    f.link.on_time();
                } else if was == WAITING && on_worker {
                    f.link.suspect(budget);
                } else if was == WAITING {
                    f.link.late(budget);
                }
            }
            me.record(key, answer, was != GAVE_UP_REFUSED);
            let _ = tx.send(answer);
        };
        if on_worker {
            tokio::spawn(trip);
        } else {
            rt.spawn(trip);
        }
        let answer = match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(a) => a.ok().flatten(),
            Err(_) => {
                let verdict = self.fall_back_check(ip);
                let mark = if verdict.is_ok() { GAVE_UP_ADMITTED } else { GAVE_UP_REFUSED };
                if state.compare_exchange(WAITING, mark, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    // No answer within the budget: the fleet thread pings Redis with the
                    // same budget, and three late in a row mark it down (a stalled Redis: in
                    // a few budgets, not the round trip's own limit of a second). A request
                    // that spent its budget waiting behind others says nothing of Redis.
                    if asked.elapsed() >= budget {
                        f.link.suspect(budget);
                    }
                    return verdict;
                }
                // The answer came as the wait ended: it decides.
                rx.await.ok().flatten()
            }
        };
        match answer {
            Some(Ok(_)) => Ok(()),
            Some(Err(wait)) => Err(wait),
            None => self.fall_back_check(ip),
        }
    }

    /// Waits (until `deadline`, the end of the request's `[fleet] timeout`) for the answer
    /// another request of the client is asking, then decides again: `None` if Redis is down
    /// meanwhile.
    async fn wait_for_answer(self: Arc<Self>, key: u128, deadline: tokio::time::Instant) -> Option<Verdict> {
        let f = super::get()?;
        let wake = {
            let s = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
            s.get(&key).and_then(|e| e.wake.clone())
        };
        if let Some(w) = wake {
            let woken = w.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // Answered between the verdict and here: no need to wait.
            let still = {
                let s = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
                s.get(&key).is_some_and(|e| e.asking(self.now()))
            };
            if still {
                let _ = tokio::time::timeout_at(deadline, woken).await;
            }
        }
        if !f.link.is_up() {
            return None;
        }
        Some(self.decide(f, key))
    }

    #[cfg(test)]
    fn remember(&self, key: u128, entry: Entry) {
        let mut s = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        if s.len() < self.cap || s.contains_key(&key) {
            s.insert(key, entry);
        }
    }

    fn fall_back(&self, ip: Option<IpAddr>) -> Verdict {
        match self.fall_back_check(ip) {
            Ok(()) => Verdict::Pass,
            Err(w) => Verdict::Refuse(w),
        }
    }

    /// The local limiter's verdict, with the limit divided among the instances.
    fn fall_back_check(&self, ip: Option<IpAddr>) -> Result<(), Duration> {
        if let Some(f) = super::get() {
            f.stats.rate_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        self.fallback_limiter().1.check(ip)
    }

    /// The local fallback, for the instances there are now.
    fn fallback_limiter(&self) -> Arc<(u32, RateLimiter)> {
        let divisor = match super::get() {
            Some(f) => {
                f.cfg.instances.unwrap_or_else(|| u32::try_from(f.stats.members.load(Ordering::Relaxed)).unwrap_or(1))
            }
            None => 1,
        }
        .max(1);
        let current = self.fallback.load();
        let limiter = match current.as_ref().filter(|l| l.0 == divisor) {
            Some(l) => l.clone(),
            None => {
                let cfg = RateConfig {
                    requests: (self.cfg.requests / divisor).max(1),
                    burst: (self.cfg.burst / divisor).max(1),
                    ..self.cfg
                };
                let l = Arc::new((divisor, RateLimiter::new(&cfg)));
                self.fallback.store(Some(l.clone()));
                l
            }
        };
        limiter
    }

    /// Clients in the local table.
    pub fn tracked(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |s| s.len())).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(requests: u32, burst: u32) -> RateConfig {
        RateConfig {
            requests,
            per: Duration::from_secs(1),
            burst,
            max_clients: 32,
            scope: crate::policy::rate::Scope::Fleet,
        }
    }

    fn verdict(l: &FleetLimiter, k: u128, now: u64) -> (Verdict, bool) {
        let x = l.local(k, now);
        (x.verdict, x.refill)
    }

    #[test]
    fn leases_are_spent_locally_and_renewed_before_they_run_out() {
        let l = FleetLimiter::new("r", &cfg(100, 40));
        assert_eq!(l.lease, 10, "a quarter of the burst");
        let k = client_key(Some("10.0.0.1".parse().unwrap()));
        let now = 5_000_000_000;
        assert!(matches!(verdict(&l, k, now), (Verdict::Ask(x), false) if x == k), "nothing known: ask");
        l.record(k, Some(Ok((10, 30))), true);
        let t = l.now();
        // Nine left: spent locally; at half left (5), one renewal starts, once.
        let mut renewals = 0;
        for _ in 0..9 {
            let (v, refill) = verdict(&l, k, t);
            assert!(matches!(v, Verdict::Pass));
            renewals += usize::from(refill);
        }
        assert_eq!(renewals, 1);
        // The renewal is late and the lease ran out: this one waits for it.
        assert!(matches!(verdict(&l, k, t), (Verdict::Wait(_), false)));
        assert!(l.shard(k).lock().unwrap().get(&k).unwrap().wake.is_some());
        l.record(k, Some(Ok((10, 20))), false);
        assert!(matches!(verdict(&l, k, l.now()), (Verdict::Pass, false)));
        // A lapsed lease is not spent.
        let later = l.now() + 2_000_000_000;
        assert!(matches!(verdict(&l, k, later), (Verdict::Ask(_), false)));
    }

    #[test]
    fn refusals_are_remembered_and_a_client_at_its_limit_waits_for_the_one_round_trip() {
        let l = FleetLimiter::new("r", &cfg(100, 40));
        let k = client_key(Some("10.0.0.2".parse().unwrap()));
        assert!(matches!(verdict(&l, k, l.now()), (Verdict::Ask(_), _)));
        l.record(k, Some(Err(Duration::from_millis(300))), true);
        let t = l.now();
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(w), false) if w > Duration::from_millis(250)));
        // The wait (and a lease's worth, 90 ms) is over: one request asks; the others are
        // refused while it does.
        let t = t + 400_000_000;
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(w), false) if w == Duration::from_millis(10)));
        l.record(k, Some(Ok((1, 0))), true);
        // The one admission was taken, and nothing is left in Redis: refused without
        // asking until a whole lease (10 intervals of 10 ms) is due, then asked once.
        let t = l.now();
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(w), false) if w > Duration::from_millis(90)));
        let t = t + 100_000_000;
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(_), false)));
        // A grant of a lease with less than another left: spent locally, no renewal, then
        // refused until the rest of a lease is due.
        l.record(k, Some(Ok((10, 4))), false);
        let t = l.now();
        for _ in 0..10 {
            assert!(matches!(verdict(&l, k, t), (Verdict::Pass, false)));
        }
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(w), false) if w > Duration::from_millis(50)));
        assert!(matches!(verdict(&l, k, t + 60_000_000), (Verdict::Ask(_), false)));
    }

    #[test]
    fn a_client_back_after_a_pause_is_not_held_at_its_limit() {
        let l = FleetLimiter::new("r", &cfg(100, 40));
        let k = client_key(Some("10.0.0.4".parse().unwrap()));
        assert!(matches!(verdict(&l, k, l.now()), (Verdict::Ask(_), _)));
        l.record(k, Some(Ok((1, 0))), true);
        // At its limit: refused until a lease is due (100 ms), and a lease's worth after
        // that, the requests beside the round trip are refused too.
        let t = l.now() + 150_000_000;
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(_), false)));
        l.record(k, None, false);
        // Back after a pause: its budget is there again, so the requests beside the round
        // trip wait for its answer instead of being refused.
        let t = l.now() + 1_000_000_000;
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        for _ in 0..49 {
            assert!(matches!(verdict(&l, k, t), (Verdict::Wait(_), false)));
        }
    }

    #[test]
    fn a_round_trip_never_answered_does_not_lock_the_client_out() {
        let l = FleetLimiter::new("r", &cfg(100, 40));
        let k = client_key(Some("10.0.0.3".parse().unwrap()));
        let t = 1_000_000_000;
        // At its limit: the one asking, the others refused while it does.
        l.remember(k, Entry { limit_until: u64::MAX, ..Entry::default() });
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        assert!(matches!(verdict(&l, k, t + 1), (Verdict::Refuse(_), false)));
        // Its answer never came (the request was dropped before the fix ran it elsewhere):
        // after STALE_ASK the next request asks again.
        assert!(matches!(verdict(&l, k, t + STALE_ASK), (Verdict::Ask(_), false)));
        // A grant of all that was left: at the limit again, refused until a lease is due;
        // then the next round trip's companions are refused; a grant with room to spare
        // lets them ask.
        l.record(k, Some(Ok((1, 0))), true);
        let t = l.now();
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(_), false)));
        let t = t + 100_000_000;
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        assert!(matches!(verdict(&l, k, t), (Verdict::Refuse(_), false)));
        l.record(k, Some(Ok((1, 10))), true);
        assert!(matches!(verdict(&l, k, t), (Verdict::Ask(_), false)));
        assert!(matches!(verdict(&l, k, t), (Verdict::Wait(_), false)), "below the limit: wait for it");
    }

    #[test]
    fn the_table_is_bounded() {
        let l = FleetLimiter::new("r", &cfg(10, 10));
        let now = l.now();
        for i in 0..10_000u32 {
            let k = client_key(Some(IpAddr::from(i.to_be_bytes())));
            l.remember(k, Entry { lease: 1, lease_until: now + 1_000_000_000_000, ..Entry::default() });
            let _ = l.local(k, now);
        }
        assert!(l.tracked() <= 32, "{}", l.tracked());
    }

    #[test]
    fn the_fallback_divides_the_limit() {
        let l = FleetLimiter::new("r", &cfg(30, 30));
        let ip = Some("10.0.0.9".parse().unwrap());
        // Not started: one instance, the whole limit.
        let n = (0..100).filter(|_| l.fall_back_check(ip).is_ok()).count();
        assert_eq!(n, 30);
    }
}
