//! The server's metrics: what `/metrics` exposes ([`expose`]) and `/status` draws.
//!
//! Requests are counted per route *slot*: a (virtual host, route) pair, numbered once by
//! the process-wide [`registry`] and kept across reloads, so a route that survives a
//! reload keeps counting where it was (Prometheus counters never go down). Each slot
//! holds requests by method class × status class × protocol, the request-duration and
//! time-to-first-byte histograms, body bytes in and out, and the upstream counters of a
//! proxy route.
//!
//! **Cost.** Every worker thread writes only its own copy of a slot's counters (a
//! [`SlotCounters`] per thread and slot, reached through a thread-local vector): an
//! increment is a relaxed load and store to a cache line no other core writes, never a
//! locked read-modify-write on a line cores fight over. A scrape sums the copies of every
//! thread under a mutex that the hot path never takes (a thread takes it once, the first
//! time it records into a slot). With metrics off ([`set_enabled`] never called) nothing
//! is recorded and requests pay one branch.

pub mod expose;
pub mod process;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use selvedge::http::{Method, Version};

/// Method classes, the `method` label.
pub const METHODS: [&str; 8] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"];
/// Status classes, the `status` label.
pub const STATUSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// Protocols, the `protocol` label (`h3` when HTTP/3 lands).
pub const PROTOCOLS: [&str; 3] = ["h1", "h2", "h3"];
/// Histogram bucket bounds in µs (the exposition's `le` in seconds): 100 µs to 10 s.
pub const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];
/// Buckets with the `+Inf` one.
pub const NBUCKETS: usize = BUCKETS_US.len() + 1;
const CELLS: usize = METHODS.len() * STATUSES.len() * PROTOCOLS.len();

/// The method class of `m` (an index into [`METHODS`]).
#[inline]
pub fn method_class(m: &Method) -> u8 {
    match *m {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::PATCH => 5,
        Method::OPTIONS => 6,
        _ => 7,
    }
}

/// The protocol of a request version (an index into [`PROTOCOLS`]).
#[inline]
pub fn protocol(v: Version) -> u8 {
    match v {
        Version::HTTP_2 => 1,
        Version::HTTP_3 => 2,
        _ => 0,
    }
}

/// The histogram bucket of `us` microseconds.
#[inline]
fn bucket(us: u64) -> usize {
    BUCKETS_US.iter().position(|&b| us <= b).unwrap_or(BUCKETS_US.len())
}

/// Adds `n` to a counter only this thread writes: a plain load and store, no lock prefix.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// A histogram of durations, counts per bucket (not cumulative) and the sum.
#[derive(Debug, Default)]
pub struct Hist {
    buckets: [AtomicU64; NBUCKETS],
    sum_us: AtomicU64,
}

impl Hist {
    #[inline]
    fn observe(&self, us: u64) {
        bump(&self.buckets[bucket(us)], 1);
        bump(&self.sum_us, us);
    }

    fn add_to(&self, t: &mut HistTotals) {
        for (o, b) in t.buckets.iter_mut().zip(&self.buckets) {
            *o += b.load(Ordering::Relaxed);
        }
        t.sum_us += self.sum_us.load(Ordering::Relaxed);
    }
}

/// Summed histogram values.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HistTotals {
    /// Counts per bucket (not cumulative), the last one `+Inf`.
    pub buckets: [u64; NBUCKETS],
    /// Sum of the observations in µs.
    pub sum_us: u64,
}

impl HistTotals {
    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// `self - earlier`, per bucket (for rates over an interval).
    pub fn since(&self, earlier: &HistTotals) -> HistTotals {
        let mut d = self.clone();
        for (o, e) in d.buckets.iter_mut().zip(&earlier.buckets) {
            *o = o.saturating_sub(*e);
        }
        d.sum_us = d.sum_us.saturating_sub(earlier.sum_us);
        d
    }

    /// The `q` quantile (0..1) in µs, interpolated within its bucket as Prometheus'
    /// `histogram_quantile` does; `None` without observations.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = q * n as f64;
        let mut seen = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c > 0 && (seen + c) as f64 >= rank {
                let lo = if i == 0 { 0 } else { BUCKETS_US[i - 1] } as f64;
                let Some(&hi) = BUCKETS_US.get(i) else { return Some(lo) };
                return Some(lo + (hi as f64 - lo) * ((rank - seen as f64) / c as f64).clamp(0.0, 1.0));
            }
            seen += c;
        }
        Some(BUCKETS_US[BUCKETS_US.len() - 1] as f64)
    }
}

/// One thread's counters for one slot.
#[derive(Debug)]
pub struct SlotCounters {
    requests: [AtomicU64; CELLS],
    duration: Hist,
    ttfb: Hist,
    body_in: AtomicU64,
    body_out: AtomicU64,
    upstream_requests: AtomicU64,
    upstream_errors: AtomicU64,
    upstream: Hist,
}

/// What one request adds to its slot.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// [`method_class`].
    pub method: u8,
    /// The response status.
    pub status: u16,
    /// [`protocol`].
    pub protocol: u8,
    /// Request body bytes (as declared by `Content-Length`).
    pub body_in: u64,
    /// Response body bytes (as the access log counts them).
    pub body_out: u64,
    /// Time to the response head, µs.
    pub ttfb_us: u64,
    /// Time to the last byte, µs; `None`: reported later, when the response ends
    /// ([`Registry::record_duration`]).
    pub duration_us: Option<u64>,
    /// The upstream's answer time in µs and whether it failed, on a proxied request.
    pub upstream: Option<(u64, bool)>,
}

impl Default for SlotCounters {
    fn default() -> Self {
        SlotCounters {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            duration: Hist::default(),
            ttfb: Hist::default(),
            body_in: AtomicU64::new(0),
            body_out: AtomicU64::new(0),
            upstream_requests: AtomicU64::new(0),
            upstream_errors: AtomicU64::new(0),
            upstream: Hist::default(),
        }
    }
}

impl SlotCounters {
    #[inline]
    fn record(&self, s: &Sample) {
        let class = (s.status / 100).clamp(1, 5) as usize - 1;
        let cell = (s.method as usize * STATUSES.len() + class) * PROTOCOLS.len() + s.protocol as usize;
        bump(&self.requests[cell], 1);
        if let Some(us) = s.duration_us {
            self.duration.observe(us);
        }
        self.ttfb.observe(s.ttfb_us);
        if s.body_in > 0 {
            bump(&self.body_in, s.body_in);
        }
        bump(&self.body_out, s.body_out);
        if let Some((us, failed)) = s.upstream {
            bump(&self.upstream_requests, 1);
            if failed {
                bump(&self.upstream_errors, 1);
            }
            self.upstream.observe(us);
        }
    }
}

/// A slot's totals over every thread.
#[derive(Debug, Default, Clone)]
pub struct SlotTotals {
    /// The virtual host's label (its first name, or `default`).
    pub vhost: Arc<str>,
    /// The route's path prefix (`none`: no route matched).
    pub route: Arc<str>,
    /// Requests by method class, status class and protocol (see [`SlotTotals::requests_at`]).
    pub requests: Vec<u64>,
    /// Time to last byte.
    pub duration: HistTotals,
    /// Time to first byte.
    pub ttfb: HistTotals,
    /// Request body bytes.
    pub body_in: u64,
    /// Response body bytes.
    pub body_out: u64,
    /// Requests sent upstream (proxy routes).
    pub upstream_requests: u64,
    /// Of those, failed (no answer: refused, reset, timed out, invalid).
    pub upstream_errors: u64,
    /// Upstream answer times.
    pub upstream: HistTotals,
}

impl SlotTotals {
    /// Requests with method class `m`, status class `s` and protocol `p` (indices).
    pub fn requests_at(&self, m: usize, s: usize, p: usize) -> u64 {
        self.requests[(m * STATUSES.len() + s) * PROTOCOLS.len() + p]
    }

    /// Every request of the slot.
    pub fn total(&self) -> u64 {
        self.requests.iter().sum()
    }
}

/// Process-wide gauges and counters outside the request path.
#[derive(Debug, Default)]
pub struct Events {
    /// Configuration reloads that took effect.
    pub reloads_ok: AtomicU64,
    /// Reloads refused (the running configuration kept).
    pub reloads_failed: AtomicU64,
    /// Changes made through the configuration API.
    pub api_changes_ok: AtomicU64,
    /// Changes the configuration API refused (invalid, stale `If-Match`, no such path).
    pub api_changes_refused: AtomicU64,
    /// When the configuration in force was loaded (seconds since the epoch).
    pub config_loaded: AtomicU64,
    /// CGI processes running now.
    pub cgi_running: AtomicI64,
    /// CGI processes started.
    pub cgi_started: AtomicU64,
}

/// Counts a CGI process as running while it lives.
#[derive(Debug)]
pub struct CgiRunning(());

impl CgiRunning {
    /// A process started.
    pub fn start() -> CgiRunning {
        let ev = &registry().events;
        ev.cgi_started.fetch_add(1, Ordering::Relaxed);
        ev.cgi_running.fetch_add(1, Ordering::Relaxed);
        CgiRunning(())
    }
}

impl Drop for CgiRunning {
    fn drop(&mut self) {
        registry().events.cgi_running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The registry: slot labels and every thread's counters.
#[derive(Debug, Default)]
pub struct Registry {
    slots: Mutex<SlotTable>,
    counters: Mutex<Vec<(u32, Arc<SlotCounters>)>>,
    /// Events outside the request path.
    pub events: Events,
}

#[derive(Debug, Default)]
struct SlotTable {
    labels: Vec<(Arc<str>, Arc<str>)>,
    index: HashMap<(Arc<str>, Arc<str>), u32>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();
static ENABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's counters, by slot, and the registry they belong to (its address).
    static LOCAL: RefCell<(usize, Vec<Option<Arc<SlotCounters>>>)> = const { RefCell::new((0, Vec::new())) };
}

/// The process's registry.
pub fn registry() -> &'static Registry {
    REGISTRY.get_or_init(Registry::default)
}

/// Turns recording on (the admin listener does, at startup).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether requests are recorded.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

impl Registry {
    /// The slot of (`vhost`, `route`), numbered on first use and kept for the process.
    pub fn slot(&self, vhost: &str, route: &str) -> u32 {
        let mut t = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let key: (Arc<str>, Arc<str>) = (vhost.into(), route.into());
        if let Some(&i) = t.index.get(&key) {
            return i;
        }
        let i = t.labels.len() as u32;
        t.labels.push(key.clone());
        t.index.insert(key, i);
        i
    }

    /// The labels of `slot`.
    pub fn labels(&self, slot: u32) -> Option<(Arc<str>, Arc<str>)> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).labels.get(slot as usize).cloned()
    }

    /// Adds `s` to `slot`'s counters of this thread.
    #[inline]
    pub fn record(&self, slot: u32, s: &Sample) {
        self.with_slot(slot, |c| c.record(s));
    }

    /// Adds a request's duration (to its last byte, µs) to `slot`'s histogram of this
    /// thread: what a [`Sample`] without one leaves for the response's end.
    #[inline]
    pub fn record_duration(&self, slot: u32, us: u64) {
        self.with_slot(slot, |c| c.duration.observe(us));
    }

    /// Runs `f` on `slot`'s counters of this thread (made on first use).
    #[inline]
    fn with_slot(&self, slot: u32, f: impl FnOnce(&SlotCounters)) {
        LOCAL.with(|l| {
            let (owner, l) = &mut *l.borrow_mut();
            let me = self as *const Registry as usize;
            if *owner != me {
                // Another registry's (tests make their own): start over for this one.
                *owner = me;
                l.clear();
            }
            let i = slot as usize;
            if let Some(Some(c)) = l.get(i) {
                f(c);
                return;
            }
            if l.len() <= i {
                l.resize(i + 1, None);
            }
            let c = Arc::new(SlotCounters::default());
            f(&c);
            self.counters.lock().unwrap_or_else(|p| p.into_inner()).push((slot, c.clone()));
            l[i] = Some(c);
        });
    }

    /// Every slot's totals, summed over the threads, in slot order.
    pub fn totals(&self) -> Vec<SlotTotals> {
        let labels = self.slots.lock().unwrap_or_else(|p| p.into_inner()).labels.clone();
        let mut out: Vec<SlotTotals> = labels
            .into_iter()
            .map(|(vhost, route)| SlotTotals { vhost, route, requests: vec![0; CELLS], ..Default::default() })
            .collect();
        for (slot, c) in self.counters.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let Some(t) = out.get_mut(*slot as usize) else { continue };
            for (o, r) in t.requests.iter_mut().zip(&c.requests) {
                *o += r.load(Ordering::Relaxed);
            }
            c.duration.add_to(&mut t.duration);
            c.ttfb.add_to(&mut t.ttfb);
            c.upstream.add_to(&mut t.upstream);
            t.body_in += c.body_in.load(Ordering::Relaxed);
            t.body_out += c.body_out.load(Ordering::Relaxed);
            t.upstream_requests += c.upstream_requests.load(Ordering::Relaxed);
            t.upstream_errors += c.upstream_errors.load(Ordering::Relaxed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_sum_on_scrape_and_slots_survive() {
        let r = Registry::default();
        let a = r.slot("default", "/");
        let b = r.slot("example.com", "/api");
        assert_eq!(r.slot("default", "/"), a);
        let s = Sample {
            method: 0,
            status: 200,
            protocol: 0,
            body_out: 10,
            ttfb_us: 50,
            duration_us: Some(300),
            ..Default::default()
        };
        let r = Arc::new(r);
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        r.record(a, &s);
                    }
                    r.record(b, &Sample { method: 7, status: 503, protocol: 1, ..s });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let t = r.totals();
        assert_eq!(t[a as usize].requests_at(0, 1, 0), 300);
        assert_eq!(t[a as usize].total(), 300);
        assert_eq!(t[a as usize].body_out, 3000);
        assert_eq!(t[a as usize].duration.buckets[bucket(300)], 300);
        assert_eq!(t[a as usize].ttfb.buckets[0], 300);
        assert_eq!(t[b as usize].requests_at(7, 4, 1), 3);
        assert_eq!(&*t[b as usize].route, "/api");
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let mut h = HistTotals::default();
        assert_eq!(h.quantile_us(0.5), None);
        h.buckets[bucket(200)] = 10; // (100, 250]
        assert_eq!(h.quantile_us(0.5), Some(175.0));
        assert_eq!(h.quantile_us(1.0), Some(250.0));
        h.buckets[NBUCKETS - 1] = 10;
        assert_eq!(h.quantile_us(0.99), Some(10_000_000.0));
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(100), 0);
        assert_eq!(bucket(101), 1);
        assert_eq!(bucket(u64::MAX), NBUCKETS - 1);
    }
}
