//! The status page and `/status.json`: a sampler thread takes the totals once a second
//! and keeps ten minutes of rates (requests/s, latency percentiles, open connections by
//! protocol, file cache hit rate), so the page has its charts as soon as it loads.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Info;
use crate::metrics::{self, HistTotals, STATUSES};

/// The page (no external assets: styles, script and charts are inline).
pub const PAGE: &str = include_str!("status.html");

/// The page's Content-Security-Policy: its own inline style and script, fetches to itself.
pub const CSP: &str =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:";

/// Samples kept: ten minutes at one a second.
const KEEP: usize = 600;
/// Time between samples.
const EVERY: Duration = Duration::from_secs(1);

/// One second of history.
#[derive(Debug, Clone, Default)]
struct Point {
    /// Seconds since the epoch.
    t: f64,
    rps: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    h1: u64,
    h2: u64,
    hit_rate: Option<f64>,
}

/// The totals a rate is taken between.
#[derive(Debug, Clone, Default)]
struct Totals {
    at: Option<Instant>,
    requests: u64,
    duration: HistTotals,
    hits: u64,
    misses: u64,
}

fn totals() -> Totals {
    let mut t = Totals { at: Some(Instant::now()), ..Totals::default() };
    for s in metrics::registry().totals() {
        t.requests += s.total();
        for (o, b) in t.duration.buckets.iter_mut().zip(&s.duration.buckets) {
            *o += b;
        }
        t.duration.sum_us += s.duration.sum_us;
    }
    let e = selvedge::stats::snapshot();
    t.hits = e.file_cache_hits;
    t.misses = e.file_cache_misses;
    t
}

#[derive(Debug, Default)]
struct Inner {
    points: VecDeque<Point>,
    last: Totals,
}

/// The sampled history.
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<Inner>>);

impl History {
    /// Starts the sampler thread (it ends with the process).
    pub fn start() -> History {
        let h = History::default();
        h.sample();
        let weak = Arc::downgrade(&h.0);
        let _ = std::thread::Builder::new().name("selvedge-status".into()).spawn(move || loop {
            std::thread::sleep(EVERY);
            let Some(inner) = weak.upgrade() else { return };
            History(inner).sample();
        });
        h
    }

    /// Takes a sample now.
    pub fn sample(&self) {
        let now = totals();
        let e = selvedge::stats::snapshot();
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(then), Some(at)) = (g.last.at, now.at) {
            let secs = at.duration_since(then).as_secs_f64().max(1e-3);
            let d = now.duration.since(&g.last.duration);
            let lookups = (now.hits + now.misses).saturating_sub(g.last.hits + g.last.misses);
            let hits = now.hits.saturating_sub(g.last.hits);
            let ms = |q| d.quantile_us(q).map(|us| (us / 10.0).round() / 100.0);
            let p = Point {
                t: crate::metrics::process::now_secs(),
                rps: (now.requests.saturating_sub(g.last.requests)) as f64 / secs,
                p50_ms: ms(0.5),
                p90_ms: ms(0.9),
                p99_ms: ms(0.99),
                h1: e.open_h1,
                h2: e.open_h2,
                hit_rate: (lookups > 0).then(|| hits as f64 / lookups as f64),
            };
            if g.points.len() == KEEP {
                g.points.pop_front();
            }
            g.points.push_back(p);
        }
        g.last = now;
    }

    fn series(&self) -> Value {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let col = |f: fn(&Point) -> Value| Value::Array(g.points.iter().map(f).collect());
        json!({
            "interval_s": EVERY.as_secs(),
            "t": col(|p| json!(p.t)),
            "rps": col(|p| json!((p.rps * 10.0).round() / 10.0)),
            "p50_ms": col(|p| json!(p.p50_ms)),
            "p90_ms": col(|p| json!(p.p90_ms)),
            "p99_ms": col(|p| json!(p.p99_ms)),
            "open_h1": col(|p| json!(p.h1)),
            "open_h2": col(|p| json!(p.h2)),
            "cache_hit_rate": col(|p| json!(p.hit_rate)),
        })
    }
}

/// `/status.json`.
pub fn json(info: &Info, history: &History) -> String {
    let ev = &metrics::registry().events;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let proc_ = metrics::process::read();
    let engine = selvedge::stats::snapshot();
    let slots = metrics::registry().totals();
    let routes: Vec<Value> = info
        .routes
        .iter()
        .map(|(vhost, prefix, target)| {
            let s = slots.iter().find(|s| &*s.vhost == vhost && &*s.route == prefix);
            let by_class: Vec<u64> = (0..STATUSES.len())
                .map(|c| {
                    s.map_or(0, |s| {
                        (0..metrics::METHODS.len())
                            .flat_map(|m| (0..metrics::PROTOCOLS.len()).map(move |p| (m, p)))
                            .map(|(m, p)| s.requests_at(m, c, p))
                            .sum()
                    })
                })
                .collect();
            let q = |q| s.and_then(|s| s.duration.quantile_us(q)).map(|us| (us / 10.0).round() / 100.0);
            json!({
                "vhost": vhost, "route": prefix, "target": target,
                "requests": s.map_or(0, |s| s.total()),
                "status": STATUSES.iter().zip(&by_class).map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
                "p50_ms": q(0.5), "p99_ms": q(0.99),
                "bytes_out": s.map_or(0, |s| s.body_out),
            })
        })
        .collect();
    let unrouted: u64 = slots.iter().filter(|s| &*s.route == "none").map(|s| s.total()).sum();
    let http_cache: Vec<Value> = crate::cache::all_zones()
        .iter()
        .map(|z| {
            let (entries, mem, disk) = z.size();
            let st = &z.stats;
            json!({
                "zone": z.name(), "entries": entries, "memory_bytes": mem, "disk_bytes": disk,
                "hits": ld(&st.hits), "misses": ld(&st.misses), "stale": ld(&st.stale),
                "revalidated": ld(&st.revalidated), "collapsed": ld(&st.collapsed),
                "stored": ld(&st.stored), "bypass": ld(&st.bypass), "evictions": z.evictions(),
            })
        })
        .collect();
    let v = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "state": super::state().as_str(),
        "now": metrics::process::now_secs(),
        "started": proc_.start_time,
        "config": {
            "file": info.config_file,
            "loaded": ld(&ev.config_loaded),
            "reloads_ok": ld(&ev.reloads_ok),
            "reloads_failed": ld(&ev.reloads_failed),
            "workers": info.workers,
        },
        "listeners": info.listeners,
        "routes": routes,
        "unrouted_requests": unrouted,
        "connections": {
            "open_h1": engine.open_h1, "open_h2": engine.open_h2, "accepted": engine.accepted,
            "reading": engine.states_h1.reading + engine.states_h2.reading,
            "writing": engine.states_h1.writing + engine.states_h2.writing,
            "idle": engine.states_h1.idle + engine.states_h2.idle,
        },
        "http_cache": http_cache,
        "file_cache": {
            "entries": engine.file_cache_entries, "hits": engine.file_cache_hits,
            "misses": engine.file_cache_misses, "evictions": engine.file_cache_evictions,
        },
        "process": {
            "rss_bytes": proc_.rss_bytes, "open_fds": proc_.open_fds, "cpu_seconds": proc_.cpu_seconds,
            "threads": proc_.threads,
        },
        "cgi_running": ev.cgi_running.load(std::sync::atomic::Ordering::Relaxed),
        "history": history.series(),
    });
    v.to_string()
}
