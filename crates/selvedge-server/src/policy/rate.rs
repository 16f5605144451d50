//! `rate`: requests per client address, by the generic cell rate algorithm (GCRA, the
//! leaky bucket as a virtual scheduler: one "theoretical arrival time" per client).
//!
//! `requests` per `per` is one request every `T = per / requests`; `burst` requests may
//! come at once from a client that has been quiet (the bucket's depth, delay tolerance
//! `τ = (burst − 1)·T`). A request at `now` is admitted when `max(TAT, now) − now ≤ τ`,
//! and then `TAT = max(TAT, now) + T`; refused, it waits `max(TAT, now) − now − τ`, sent as
//! `Retry-After` (whole seconds, at least 1).
//!
//! Memory is bounded, however many addresses are seen: the table holds at most
//! `max_clients` addresses (in 16 shards of `max_clients / 16`, rounded up). A client whose
//! TAT has passed is in the same state as one never seen, so its entry is dropped when a
//! full shard is swept; when a shard is full of clients still inside their window, new
//! addresses share that shard's one overflow bucket (they are limited together, never
//! unlimited). IPv6 clients are counted by /64 (one subscriber's addresses), IPv4 ones by
//! address; Unix-socket clients, which have no address, share one bucket.
//!
//! The algorithm takes `now` as an argument, so it is tested without a clock.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::units::{Count, NonZeroDur};

const SHARDS: usize = 16;

/// `rate = { requests, per, burst, max_clients }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    requests: Count<1, { u32::MAX as u64 }>,
    per: NonZeroDur,
    burst: Option<Count<1, { u32::MAX as u64 }>>,
    max_clients: Option<Count<1, 100_000_000>>,
    scope: Option<Scope>,
}

/// Where a rate limit is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// By this server alone.
    #[default]
    Local,
    /// By every server of the fleet together, in Redis (`crate::fleet::rate`; needs
    /// `[fleet]`).
    Fleet,
}

/// A route's rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    /// Requests admitted per `per` in the long run.
    pub requests: u32,
    /// The window `requests` are counted over.
    pub per: Duration,
    /// Requests admitted at once from a quiet client: `requests` by default.
    pub burst: u32,
    /// Client addresses tracked at most: 65,536.
    pub max_clients: usize,
    /// `scope`: local.
    pub scope: Scope,
}

impl RateConfig {
    /// Checks the table as written.
    ///
    /// # Errors
    /// A rate faster than one request per nanosecond.
    pub fn from_raw(r: &RawRate) -> Result<RateConfig, String> {
        let c = RateConfig {
            requests: r.requests.get_u32(),
            per: r.per.get(),
            burst: r.burst.map_or(r.requests.get_u32(), Count::get_u32),
            max_clients: r.max_clients.map_or(65_536, Count::get_usize),
            scope: r.scope.unwrap_or_default(),
        };
        if c.per.as_nanos() < u128::from(c.requests) {
            return Err("rate: more than one request per nanosecond".into());
        }
        Ok(c)
    }
}

/// One GCRA step: the new TAT if a request at `now` is admitted, else how long to wait.
fn gcra(tat: u64, now: u64, interval: u64, tolerance: u64) -> Result<u64, u64> {
    let tat = tat.max(now);
    let ahead = tat - now;
    if ahead > tolerance {
        Err(ahead - tolerance)
    } else {
        Ok(tat.saturating_add(interval))
    }
}

struct Shard {
    tat: HashMap<u128, u64>,
    cap: usize,
    /// The TAT of the addresses that found the shard full.
    overflow: u64,
    /// No entry expires before this (a full shard is not swept again until then).
    next_sweep: u64,
}

/// The limiter of one route.
pub struct RateLimiter {
    interval: u64,
    tolerance: u64,
    shards: Box<[Mutex<Shard>]>,
    hash: RandomState,
    epoch: Instant,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter").field("interval_ns", &self.interval).field("tracked", &self.tracked()).finish()
    }
}

/// The table key of a client: IPv4 as its mapped IPv6 form, IPv6 by /64, none as all ones.
pub(crate) fn client_key(ip: Option<IpAddr>) -> u128 {
    match ip {
        Some(IpAddr::V4(a)) => (0xffff << 32) | u128::from(u32::from(a)),
        Some(IpAddr::V6(a)) => u128::from(a) & !u128::from(u64::MAX),
        None => u128::MAX,
    }
}

/// Every route's limiter, by route and settings: a rebuilt site (a reload, a change through
/// the admin API) takes over the running limiter of a route whose `rate` did not change,
/// so its clients' counts go on (a change every few seconds would otherwise lift every
/// limit). Entries go with the last site that used them.
static LIMITERS: Mutex<Vec<(String, RateConfig, std::sync::Weak<RateLimiter>)>> = Mutex::new(Vec::new());

impl RateLimiter {
    /// The limiter of `route` with `cfg`: the running one if there is one, else a new one.
    pub fn shared(route: &str, cfg: &RateConfig) -> std::sync::Arc<RateLimiter> {
        let mut all = LIMITERS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(_, _, w)| w.strong_count() > 0);
        if let Some(l) = all.iter().find(|(r, c, _)| r == route && c == cfg).and_then(|(_, _, w)| w.upgrade()) {
            return l;
        }
        let l = std::sync::Arc::new(RateLimiter::new(cfg));
        all.push((route.to_string(), *cfg, std::sync::Arc::downgrade(&l)));
        l
    }

    /// A limiter for `cfg`.
    pub fn new(cfg: &RateConfig) -> RateLimiter {
        let interval = u64::try_from(cfg.per.as_nanos() / u128::from(cfg.requests)).unwrap_or(u64::MAX).max(1);
        let tolerance = interval.saturating_mul(u64::from(cfg.burst.max(1)) - 1);
        let cap = cfg.max_clients.div_ceil(SHARDS).max(1);
        let shards =
            (0..SHARDS).map(|_| Mutex::new(Shard { tat: HashMap::new(), cap, overflow: 0, next_sweep: 0 })).collect();
        RateLimiter { interval, tolerance, shards, hash: RandomState::new(), epoch: Instant::now() }
    }

    /// Admits a request from `ip` now, or says how long it should wait.
    ///
    /// # Errors
    /// Over the limit: the time until a request would be admitted.
    pub fn check(&self, ip: Option<IpAddr>) -> Result<(), Duration> {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.check_at(client_key(ip), now).map_err(Duration::from_nanos)
    }

    fn check_at(&self, key: u128, now: u64) -> Result<(), u64> {
        let shard = &self.shards[self.hash.hash_one(key) as usize % SHARDS];
        let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = s.tat.get_mut(&key) {
            *t = gcra(*t, now, self.interval, self.tolerance)?;
            return Ok(());
        }
        if s.tat.len() >= s.cap && now >= s.next_sweep {
            let mut next = u64::MAX;
            s.tat.retain(|_, t| {
                next = next.min(*t);
                *t > now
            });
            s.next_sweep = next;
        }
        if s.tat.len() >= s.cap {
            s.overflow = gcra(s.overflow, now, self.interval, self.tolerance)?;
            return Ok(());
        }
        let t = gcra(0, now, self.interval, self.tolerance)?;
        s.tat.insert(key, t);
        Ok(())
    }

    /// Counts `n` admissions of client `key` now, as `n` checks in a row would (those over
    /// the limit change nothing): the fleet's admissions, shadowed here.
    pub(crate) fn charge(&self, key: u128, n: u32) {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let step = |t: &mut u64| {
            let base = (*t).max(now);
            if base - now <= self.tolerance {
                let most = now.saturating_add(self.tolerance).saturating_add(self.interval);
                *t = base.saturating_add(self.interval.saturating_mul(u64::from(n))).min(most);
            }
        };
        let shard = &self.shards[self.hash.hash_one(key) as usize % SHARDS];
        let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = s.tat.get_mut(&key) {
            step(t);
        } else if s.tat.len() < s.cap {
            let mut t = 0;
            step(&mut t);
            s.tat.insert(key, t);
        } else {
            step(&mut s.overflow);
        }
    }

    /// Addresses in the table now.
    pub fn tracked(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |s| s.tat.len())).sum()
    }
}

/// `Retry-After` for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after(wait: Duration) -> u64 {
    wait.as_nanos().div_ceil(1_000_000_000).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(requests: u32, per_ms: u64, burst: u32, max_clients: usize) -> RateLimiter {
        RateLimiter::new(&RateConfig {
            requests,
            per: Duration::from_millis(per_ms),
            burst,
            max_clients,
            scope: Scope::Local,
        })
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn burst_then_the_rate() {
        // 10 per second (one per 100 ms), bursts of 3.
        let l = limiter(10, 1000, 3, 100);
        let k = client_key(Some("10.0.0.1".parse().unwrap()));
        let t0 = 5_000 * MS;
        assert!((0..3).all(|_| l.check_at(k, t0).is_ok()));
        assert_eq!(l.check_at(k, t0), Err(100 * MS), "the fourth waits one interval");
        assert_eq!(l.check_at(k, t0 + 40 * MS), Err(60 * MS));
        assert!(l.check_at(k, t0 + 100 * MS).is_ok());
        assert!(l.check_at(k, t0 + 100 * MS).is_err());
        // Quiet for a while: the whole burst again, no more.
        let t1 = t0 + 10_000 * MS;
        assert_eq!((0..5).filter(|_| l.check_at(k, t1).is_ok()).count(), 3);
        // Another client has its own bucket.
        assert!(l.check_at(client_key(Some("10.0.0.2".parse().unwrap())), t1).is_ok());
        // One IPv6 /64 is one client.
        let a = client_key(Some("2001:db8::1".parse().unwrap()));
        assert_eq!(a, client_key(Some("2001:db8::ffff:1".parse().unwrap())));
        assert_ne!(a, client_key(Some("2001:db8:0:1::1".parse().unwrap())));
        assert_eq!(retry_after(Duration::from_millis(1)), 1);
        assert_eq!(retry_after(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn charged_admissions_count_as_checks_would() {
        // 10 per second, bursts of 3: charging 2 leaves one; charging 5 leaves none, and
        // no more debt than checks would have made.
        let l = limiter(10, 1000, 3, 100);
        let k = client_key(Some("10.0.0.7".parse().unwrap()));
        l.charge(k, 2);
        let now = u64::try_from(l.epoch.elapsed().as_nanos()).unwrap();
        assert!(l.check_at(k, now).is_ok());
        assert!(l.check_at(k, now).is_err());
        let k2 = client_key(Some("10.0.0.8".parse().unwrap()));
        l.charge(k2, 5);
        let now = u64::try_from(l.epoch.elapsed().as_nanos()).unwrap();
        let wait = l.check_at(k2, now).unwrap_err();
        assert!(wait <= 100 * MS, "at most one interval of debt: {wait}");
    }

    #[test]
    fn memory_is_bounded_and_expired_clients_are_swept() {
        // One per hour, 160 clients at most (10 per shard).
        let l = limiter(1, 3_600_000, 1, 160);
        let now = 1_000 * MS;
        let mut admitted = 0;
        for i in 0..10_000u32 {
            let k = client_key(Some(IpAddr::from((0x7f00_0000 | i).to_be_bytes())));
            admitted += usize::from(l.check_at(k, now).is_ok());
        }
        assert_eq!(l.tracked(), 160);
        // Each shard admitted its 10 clients, then one overflow request.
        assert_eq!(admitted, 160 + SHARDS);
        // An hour later every entry has expired: new clients take their places.
        let later = now + 3_600_001 * MS;
        for i in 10_000..10_040u32 {
            let k = client_key(Some(IpAddr::from((0x7f00_0000 | i).to_be_bytes())));
            assert!(l.check_at(k, later).is_ok());
        }
        assert!(l.tracked() <= 160);
    }
}
