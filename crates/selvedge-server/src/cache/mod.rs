//! The HTTP cache in front of proxy and FastCGI routes: a shared cache per RFC 9111, in
//! memory with an optional disk tier.
//!
//! - [`control`]: the RFC's rules as pure functions (directives, storability, freshness,
//!   age, `Vary`), fed by the shell here and by the fuzz target.
//! - [`store`]: a zone's entries in shards bounded in bytes, evicted by CLOCK, and the
//!   disk tier's files.
//! - this module: zones (`[[cache]]` or a route's own), a route's use of one
//!   ([`RouteCache`]): the lookup, answering from an entry (`Age`, `304` to conditional
//!   clients, `206` from a stored `200`, `HEAD` from a `GET`), the fetch on a miss with
//!   request collapsing, revalidation with validators, `stale-while-revalidate` in the
//!   background and `stale-if-error`, invalidation after unsafe methods, purges, counters.
//!
//! One request's way: a fresh hit is answered at once, without a task or the upstream
//! ([`RouteCache::hit_now`], on the path that answers static files); everything else waits
//! ([`RouteCache::serve`]).

pub mod control;
pub mod store;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use selvedge::file::range::{self, Ranges};
use selvedge::file::{conditional, Precondition, Preconditions};
use selvedge::http::header::{self, HeaderName, HeaderValue};
use selvedge::http::{Method, StatusCode};
use selvedge::{BodyTap, Request, Response, SharedFields};
use serde::Deserialize;

use crate::lang::matcher::{Match, Matchers, RawMatch};
use crate::lang::template::{Context, Template};
use crate::units::{Count, Dur, NonZeroDur, Size};
use control::{Answered, Asked, NotStored, RequestDirectives, ResponseDirectives, Secs, Stored, Use};
use store::{Bodied, Entry, FileHead, Spool, Store};

/// The `Cache-Status` field (RFC 9211).
static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// A zone's table as written: `[[cache]]` (with `name`), or a route's `cache = { ... }`
/// (which may also name a zone and set the route's own keys).
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawCacheTable {
    /// The zone's name (`[[cache]]`), or the zone a route uses.
    pub name: Option<String>,
    /// A route's: the `[[cache]]` zone it uses.
    pub zone: Option<String>,
    /// Memory for entries (bodies, fields, keys).
    pub size: Option<Size<4096>>,
    /// The disk tier's directory.
    pub path: Option<String>,
    /// Bytes of files in the disk tier.
    pub disk_size: Option<Size<4096>>,
    /// The largest body stored.
    pub max_entry_size: Option<Size<1>>,
    /// With `path`: bodies up to this size are kept in memory too.
    pub memory_entry_size: Option<Size>,
    /// The fraction of the time since `Last-Modified` taken as the freshness lifetime of a
    /// response that says nothing (0: off).
    pub heuristic: Option<f64>,
    /// How long past its lifetime a response may be served when the upstream fails, when
    /// the response does not say.
    pub stale_if_error: Option<Dur>,
    /// How long a request waits for another's fetch of the same key.
    pub lock_timeout: Option<NonZeroDur>,
    /// Requests that may wait for one fetch.
    pub lock_waiters: Option<Count<0, 1_000_000>>,
    /// Requests for a key before its response is stored.
    pub min_uses: Option<Count<1, 1000>>,
    /// Follow a request's `no-cache`, `max-age`, `min-fresh`, `max-stale` and
    /// `stale-if-error`.
    pub client_directives: Option<bool>,
    /// The key, a template (default: scheme, authority as sent, normalized path, query).
    pub key: Option<String>,
    /// A route's: requests these matchers admit skip the cache (neither read nor stored).
    pub bypass: Option<RawMatch>,
    /// A route's: responses to requests these matchers admit are not stored.
    pub no_store: Option<RawMatch>,
}

/// A route's `cache`: a zone's name, or a table.
#[derive(Debug, Clone)]
pub enum RawRouteCache {
    /// `cache = "pages"`.
    Zone(String),
    /// `cache = { size = "64MiB" }`, `cache = { zone = "pages", bypass = "nocache" }`.
    Table(Box<RawCacheTable>),
}

impl<'de> Deserialize<'de> for RawRouteCache {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawRouteCache;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a [[cache]] zone's name, or a table (`{ size = \"64MiB\" }`)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawRouteCache, E> {
                Ok(RawRouteCache::Zone(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawRouteCache, A::Error> {
                RawCacheTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|t| RawRouteCache::Table(Box::new(t)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A checked zone; every default is documented on its field.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneConfig {
    /// Its name (a route's own zone: `route HOSTS PREFIX`).
    pub name: String,
    /// Memory: 64 MiB.
    pub size: u64,
    /// The disk tier's directory: none.
    pub path: Option<PathBuf>,
    /// Disk bytes: 1 GiB (with `path`).
    pub disk_size: u64,
    /// The largest body stored: 8 MiB, or 1/8 of `size` if less, without `path`; 64 MiB
    /// (or `disk_size`/8) with it.
    pub max_entry_size: u64,
    /// With `path`, bodies up to this are kept in memory too: 256 KiB.
    pub memory_entry_size: u64,
    /// Heuristic freshness: 0 (off, as nginx).
    pub heuristic: f64,
    /// Default `stale-if-error`: 0 (only what the response or request says).
    pub stale_if_error: Secs,
    /// Collapsed requests wait at most this for the fetch: 5 s (nginx's
    /// `proxy_cache_lock_timeout`); then they go upstream themselves, uncached.
    pub lock_timeout: Duration,
    /// Requests that may wait on one fetch: 1024 (more go upstream themselves).
    pub lock_waiters: usize,
    /// Requests for a key before it is stored: 1.
    pub min_uses: u32,
    /// A request's `no-cache`, `max-age`, `min-fresh`, `max-stale` and `stale-if-error`
    /// are followed: `false` (as nginx and Varnish: a client cannot send every request
    /// upstream); `no-store` and `only-if-cached` always are.
    pub client_directives: bool,
    /// The key's template: none (`scheme://authority/path?query`: the authority as the
    /// client sent it, the normalized path, the query as sent).
    pub key: Option<String>,
}

impl ZoneConfig {
    /// Checks a zone's table (`dir`: where relative paths start).
    ///
    /// # Errors
    /// The reason.
    pub fn from_raw(raw: &RawCacheTable, name: String, abs: &dyn Fn(&str) -> PathBuf) -> Result<ZoneConfig, String> {
        let size = raw.size.map_or(64 << 20, Size::get);
        let path = raw.path.as_deref().map(abs);
        if raw.disk_size.is_some() && path.is_none() {
            return Err("cache disk_size needs path".into());
        }
        let disk_size = raw.disk_size.map_or(1 << 30, Size::get);
        let max_entry_size = raw.max_entry_size.map_or_else(
            || if path.is_some() { (64 << 20).min(disk_size / 8) } else { (8 << 20).min(size / 8) },
            Size::get,
        );
        let memory_entry_size = raw.memory_entry_size.map_or(256 << 10, Size::get);
        let heuristic = raw.heuristic.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&heuristic) {
            return Err(format!("cache heuristic {heuristic}: a fraction from 0 to 1 (0.1: 10%)"));
        }
        if let Some(k) = &raw.key {
            Template::parse(k, &crate::lang::template::NoCaptures).map_err(|e| format!("cache key: {e}"))?;
        }
        Ok(ZoneConfig {
            name,
            size,
            path,
            disk_size: if raw.path.is_some() { disk_size } else { 0 },
            max_entry_size,
            memory_entry_size,
            heuristic,
            stale_if_error: raw.stale_if_error.map_or(0, |d| d.get().as_secs()),
            lock_timeout: raw.lock_timeout.map_or(Duration::from_secs(5), NonZeroDur::get),
            lock_waiters: raw.lock_waiters.map_or(1024, Count::get_usize),
            min_uses: raw.min_uses.map_or(1, Count::get_u32),
            client_directives: raw.client_directives.unwrap_or(false),
            key: raw.key.clone(),
        })
    }
}

/// A route's use of a zone, checked.
#[derive(Debug, Clone)]
pub struct RouteCacheConfig {
    /// The zone: a `[[cache]]` zone's name, or the route's own.
    pub zone: ZoneRef,
    /// The key (the route's, else the zone's, else the default).
    pub key: Option<Template>,
    /// `bypass`.
    pub bypass: Option<Match>,
    /// `no_store`.
    pub no_store: Option<Match>,
}

/// Which zone a route uses.
#[derive(Debug, Clone)]
pub enum ZoneRef {
    /// A `[[cache]]` zone.
    Named(String),
    /// Its own.
    Own(Box<ZoneConfig>),
}

impl RouteCacheConfig {
    /// Checks a route's `cache` (`zones`: the `[[cache]]` zones; `label`: the route's name
    /// for its own zone).
    ///
    /// # Errors
    /// The reason.
    pub fn from_raw(
        raw: &RawRouteCache,
        zones: &[ZoneConfig],
        matchers: &mut Matchers,
        label: &str,
        abs: &dyn Fn(&str) -> PathBuf,
    ) -> Result<RouteCacheConfig, String> {
        let table = match raw {
            RawRouteCache::Zone(z) => RawCacheTable { zone: Some(z.clone()), ..RawCacheTable::default() },
            RawRouteCache::Table(t) => (**t).clone(),
        };
        if table.name.is_some() {
            return Err("cache: a route names its zone with `zone = \"NAME\"` (`name` is [[cache]]'s)".into());
        }
        let zone = match &table.zone {
            Some(z) => {
                let own = RawCacheTable { zone: None, key: None, bypass: None, no_store: None, ..table.clone() };
                if format!("{own:?}") != format!("{:?}", RawCacheTable::default()) {
                    return Err(format!("cache: zone {z:?} is configured in its [[cache]] table, not on the route"));
                }
                let Some(zc) = zones.iter().find(|c| &c.name == z) else {
                    return Err(format!("cache zone {z:?} is not defined (`[[cache]] name = {z:?}`)"));
                };
                ZoneRef::Named(zc.name.clone())
            }
            None => ZoneRef::Own(Box::new(ZoneConfig::from_raw(&table, format!("route {label}"), abs)?)),
        };
        let zone_key = match &zone {
            ZoneRef::Named(n) => zones.iter().find(|c| &c.name == n).and_then(|c| c.key.clone()),
            ZoneRef::Own(c) => c.key.clone(),
        };
        let key = match table.key.as_ref().or(zone_key.as_ref()) {
            Some(k) => Some(Template::parse(k, matchers).map_err(|e| format!("cache key: {e}"))?),
            None => None,
        };
        let mut resolve = |m: &Option<RawMatch>, what: &str| -> Result<Option<Match>, String> {
            m.as_ref().map(|m| matchers.resolve(m, &format!("cache {what} of {label}"))).transpose()
        };
        let bypass = resolve(&table.bypass, "bypass")?;
        let no_store = resolve(&table.no_store, "no_store")?;
        Ok(RouteCacheConfig { zone, key, bypass, no_store })
    }
}

/// A zone's counters (and `/metrics`' view of them).
#[derive(Debug, Default)]
pub struct Stats {
    /// Answered from the cache, fresh.
    pub hits: AtomicU64,
    /// Fetched: nothing usable was stored.
    pub misses: AtomicU64,
    /// Answered stale (`stale-while-revalidate`, `stale-if-error`).
    pub stale: AtomicU64,
    /// Revalidated with the upstream (a 304 kept the entry).
    pub revalidated: AtomicU64,
    /// Responses stored.
    pub stored: AtomicU64,
    /// Requests that waited for another's fetch of their key.
    pub collapsed: AtomicU64,
    /// Requests that skipped the cache (`bypass`, methods other than GET and HEAD).
    pub bypass: AtomicU64,
}

/// One fetch in flight for a key: the requests that wait for it.
#[derive(Debug, Default)]
struct Flight {
    done: tokio::sync::Notify,
    waiters: AtomicUsize,
}

/// A cache zone: its store, fetches in flight, counters.
#[derive(Debug)]
pub struct Zone {
    cfg: Mutex<ZoneConfig>,
    /// Read on every request: copied out of `cfg`.
    limits: ZoneLimits,
    store: Store,
    dir: Option<Arc<Path>>,
    flights: Mutex<HashMap<u64, Arc<Flight>>>,
    /// Uses of keys not stored yet (`min_uses`), bounded.
    uses: Mutex<HashMap<u64, u32>>,
    /// Counters.
    pub stats: Stats,
}

#[derive(Debug)]
struct ZoneLimits {
    max_entry: AtomicU64,
    mem_entry: AtomicU64,
    heuristic_ppm: AtomicU64,
    stale_if_error: AtomicU64,
    lock_timeout_ms: AtomicU64,
    lock_waiters: AtomicUsize,
    min_uses: AtomicU64,
    client_directives: std::sync::atomic::AtomicBool,
}

/// Keys counted for `min_uses` before the count starts over.
const MAX_USES_TRACKED: usize = 100_000;

fn zones() -> &'static Mutex<HashMap<String, Arc<Zone>>> {
    static ZONES: OnceLock<Mutex<HashMap<String, Arc<Zone>>>> = OnceLock::new();
    ZONES.get_or_init(Default::default)
}

impl Zone {
    /// The zone `cfg` describes: the running one of that name (entries kept, limits set
    /// anew) unless its directory changed, else a new one (its disk tier read back).
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn get_or_create(cfg: &ZoneConfig) -> std::io::Result<Arc<Zone>> {
        let mut all = zones().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(z) = all.get(&cfg.name) {
            let same_dir = z.cfg.lock().unwrap_or_else(|p| p.into_inner()).path == cfg.path;
            if same_dir {
                z.configure(cfg);
                return Ok(z.clone());
            }
        }
        let dir: Option<Arc<Path>> = match &cfg.path {
            Some(p) => {
                let err = |e: std::io::Error| std::io::Error::new(e.kind(), format!("cache {}: {e}", cfg.name));
                store::claim_dir(p).map_err(err)?;
                // Compared resolved: a symlink or `..` is no way for two zones to share one.
                let real = p.canonicalize().map_err(err)?;
                if let Some((name, _)) = all.iter().find(|(n, z)| **n != cfg.name && z.dir.as_deref() == Some(&real)) {
                    return Err(std::io::Error::other(format!(
                        "cache {}: path {} is zone {name}'s too (each zone needs a directory of its own)",
                        cfg.name,
                        p.display()
                    )));
                }
                Some(Arc::from(real.as_path()))
            }
            None => None,
        };
        let z = Arc::new(Zone {
            cfg: Mutex::new(cfg.clone()),
            limits: ZoneLimits {
                max_entry: AtomicU64::new(0),
                mem_entry: AtomicU64::new(0),
                heuristic_ppm: AtomicU64::new(0),
                stale_if_error: AtomicU64::new(0),
                lock_timeout_ms: AtomicU64::new(0),
                lock_waiters: AtomicUsize::new(0),
                min_uses: AtomicU64::new(1),
                client_directives: Default::default(),
            },
            store: Store::new(cfg.size, cfg.disk_size),
            dir,
            flights: Mutex::default(),
            uses: Mutex::default(),
            stats: Stats::default(),
        });
        z.configure(cfg);
        z.load();
        all.insert(cfg.name.clone(), z.clone());
        Ok(z)
    }

    fn configure(&self, cfg: &ZoneConfig) {
        let l = &self.limits;
        l.max_entry.store(cfg.max_entry_size, Ordering::Relaxed);
        l.mem_entry.store(if cfg.path.is_some() { cfg.memory_entry_size } else { u64::MAX }, Ordering::Relaxed);
        l.heuristic_ppm.store((cfg.heuristic * 1e6) as u64, Ordering::Relaxed);
        l.stale_if_error.store(cfg.stale_if_error, Ordering::Relaxed);
        l.lock_timeout_ms.store(cfg.lock_timeout.as_millis() as u64, Ordering::Relaxed);
        l.lock_waiters.store(cfg.lock_waiters, Ordering::Relaxed);
        l.min_uses.store(u64::from(cfg.min_uses), Ordering::Relaxed);
        l.client_directives.store(cfg.client_directives, Ordering::Relaxed);
        self.store.set_limits(cfg.size, cfg.disk_size);
        *self.cfg.lock().unwrap_or_else(|p| p.into_inner()) = cfg.clone();
    }

    fn heuristic(&self) -> f64 {
        self.limits.heuristic_ppm.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Reads the disk tier back into the index.
    fn load(&self) {
        let Some(dir) = &self.dir else { return };
        let mem_entry = self.limits.mem_entry.load(Ordering::Relaxed);
        let mut n = 0;
        let mut files = store::scan(dir);
        // Oldest first: of two files for one variant, the newer is kept.
        files.sort_by_key(|(h, ..)| h.response_time);
        for (head, at, len, path) in files {
            let file = Arc::new(store::DiskFile::new(path.to_path_buf()));
            let body = if len <= mem_entry {
                match read_range(&path, at, len) {
                    Some(b) => Bodied::Mem(b),
                    None => continue,
                }
            } else {
                Bodied::Disk { file: file.clone(), offset: at, len }
            };
            let Some(status) = StatusCode::from_u16(head.status).ok() else { continue };
            let hash = self.store.hash(&head.key);
            let e = make_entry(
                self,
                Parts {
                    key: head.key,
                    variant: head.variant,
                    status,
                    fields: head.fields,
                    request_time: head.request_time,
                    response_time: head.response_time,
                    age: head.age,
                    date: head.date,
                },
                body,
                Some((file, at + len)),
            );
            if let Some(e) = e {
                n += usize::from(self.store.insert(hash, e));
            }
        }
        if n > 0 {
            tracing::info!("cache {}: {n} entries read back from {}", self.name(), dir.display());
        }
    }

    /// Its name.
    pub fn name(&self) -> String {
        self.cfg.lock().unwrap_or_else(|p| p.into_inner()).name.clone()
    }

    /// Removes the entries of `key`, or of keys starting with `prefix`.
    pub fn purge(&self, key: Option<&[u8]>, prefix: Option<&[u8]>) -> usize {
        let mut n = 0;
        if let Some(k) = key {
            n += self.store.remove(self.store.hash(k), k);
        }
        if let Some(p) = prefix {
            n += self.store.remove_prefix(p);
        }
        n
    }

    /// Entries, and bytes in memory and on disk.
    pub fn size(&self) -> (u64, u64, u64) {
        let (m, d) = self.store.bytes();
        (self.store.counters.entries.load(Ordering::Relaxed), m, d)
    }

    /// Entries evicted for room.
    pub fn evictions(&self) -> u64 {
        self.store.counters.evictions.load(Ordering::Relaxed)
    }

    /// Whether the `min_uses`th request for a key has come (counting this one).
    fn used_enough(&self, hash: u64) -> bool {
        let min = self.limits.min_uses.load(Ordering::Relaxed) as u32;
        if min <= 1 {
            return true;
        }
        let mut uses = self.uses.lock().unwrap_or_else(|p| p.into_inner());
        if uses.len() >= MAX_USES_TRACKED {
            uses.clear();
        }
        let n = uses.entry(hash).or_insert(0);
        *n += 1;
        if *n >= min {
            uses.remove(&hash);
            return true;
        }
        false
    }
}

/// Every zone, for `/metrics`, the status page and purges.
pub fn all_zones() -> Vec<Arc<Zone>> {
    let mut v: Vec<_> = zones().lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
    v.sort_by_key(|z| z.name());
    v
}

/// Forgets zones no route uses any more (after a reload): their memory goes, and with a
/// zone dropped, its files.
pub fn retain_zones(used: &[String]) {
    zones().lock().unwrap_or_else(|p| p.into_inner()).retain(|name, _| used.contains(name));
}

fn read_range(path: &Path, at: u64, len: u64) -> Option<Bytes> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    f.read_exact_at(&mut buf, at).ok()?;
    Some(Bytes::from(buf))
}

/// Seconds since the epoch.
fn now() -> Secs {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The parts of a response kept in an entry.
struct Parts {
    key: Vec<u8>,
    variant: Vec<u8>,
    status: StatusCode,
    fields: Vec<(HeaderName, HeaderValue)>,
    request_time: Secs,
    response_time: Secs,
    /// The response's `Age` and `Date` (not kept among its fields: each answer has its own).
    age: Option<Secs>,
    date: Option<Secs>,
}

/// What a response says of itself, read from its fields.
fn stored_of<'a>(
    fields: impl IntoIterator<Item = &'a (HeaderName, HeaderValue)>,
    request_time: Secs,
    response_time: Secs,
) -> Stored {
    let mut cc: Vec<&[u8]> = Vec::new();
    let mut s = Stored { request_time, response_time, ..Stored::default() };
    for (n, v) in fields {
        let v = v.as_bytes();
        if n == header::CACHE_CONTROL {
            cc.push(v);
        } else if n == header::DATE {
            s.date = s.date.or_else(|| conditional::parse_http_date(v));
        } else if n == header::EXPIRES && s.expires.is_none() {
            s.expires = Some(conditional::parse_http_date(v).unwrap_or(0));
        } else if n == header::LAST_MODIFIED {
            s.last_modified = s.last_modified.or_else(|| conditional::parse_http_date(v));
        } else if n == header::AGE {
            s.age = s.age.or_else(|| control::delta_seconds(v.trim_ascii()));
        }
    }
    s.cc = ResponseDirectives::parse(&cc);
    s
}

/// An entry of `p` with `body` (`file`: its file in the disk tier, and the file's length).
/// `None`: its `Vary` has `*`.
fn make_entry(zone: &Zone, p: Parts, body: Bodied, file: Option<(Arc<store::DiskFile>, u64)>) -> Option<Entry> {
    let mut stored = stored_of(&p.fields, p.request_time, p.response_time);
    (stored.age, stored.date) = (p.age, p.date);
    let lifetime = control::freshness_lifetime(&stored, zone.heuristic()).unwrap_or(0);
    let vary_lines: Vec<&[u8]> =
        p.fields.iter().filter(|(n, _)| n == header::VARY).map(|(_, v)| v.as_bytes()).collect();
    let vary = control::vary_names(&vary_lines).ok()?;
    let etag = p.fields.iter().find(|(n, _)| n == header::ETAG).map(|(_, v)| v.clone());
    let last_modified = stored.last_modified;
    let fields = Arc::new(SharedFields::new(p.fields));
    let mem_body = match &body {
        Bodied::Mem(b) => b.len() as u64,
        Bodied::Open(o) => o.len,
        Bodied::Disk { .. } => 0,
    };
    let mem_size = mem_body + store::overhead(&p.key, &p.variant, &fields);
    let (file, disk_size) = match file {
        Some((f, len)) => (Some(f), len),
        None => (None, 0),
    };
    Some(Entry {
        key: p.key.into(),
        vary: vary.into(),
        variant: p.variant.into(),
        status: p.status,
        fields,
        stored,
        lifetime,
        etag,
        last_modified,
        body,
        file,
        mem_size,
        disk_size,
        referenced: Default::default(),
        removed: Default::default(),
    })
}

/// A route's cache.
#[derive(Debug)]
pub struct RouteCache {
    zone: Arc<Zone>,
    key: Option<Template>,
    bypass: Option<Match>,
    no_store: Option<Match>,
    matchers: Matchers,
}

/// Fetches a request from the route's upstream, as a `'static` future (a background
/// revalidation outlives the request that started it).
pub type Fetch = Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync>;

/// The request fields this cache reads, found in one pass.
#[derive(Default)]
struct Asks<'r> {
    cache_control: Vec<&'r [u8]>,
    pragma: Vec<&'r [u8]>,
    authorization: bool,
    pre: Preconditions<'r>,
    range: Option<&'r [u8]>,
    if_range: Option<&'r [u8]>,
}

impl<'r> Asks<'r> {
    fn of(req: &'r Request) -> Asks<'r> {
        let mut a = Asks::default();
        for (n, v) in req.header_bytes() {
            let is = |s: &str| n.eq_ignore_ascii_case(s.as_bytes());
            match n.len() {
                5 if is("range") => a.range = Some(v),
                6 if is("pragma") => a.pragma.push(v),
                8 if is("if-match") => a.pre.if_match = Some(v),
                8 if is("if-range") => a.if_range = Some(v),
                13 if is("cache-control") => a.cache_control.push(v),
                13 if is("authorization") => a.authorization = true,
                13 if is("if-none-match") => a.pre.if_none_match = Some(v),
                17 if is("if-modified-since") => a.pre.if_modified_since = Some(v),
                19 if is("if-unmodified-since") => a.pre.if_unmodified_since = Some(v),
                _ => {}
            }
        }
        a
    }

    fn directives(&self) -> RequestDirectives {
        if self.cache_control.is_empty() && self.pragma.is_empty() {
            return RequestDirectives::default();
        }
        RequestDirectives::parse(&self.cache_control, &self.pragma)
    }

    fn conditional(&self) -> bool {
        let p = &self.pre;
        p.if_match.is_some()
            || p.if_none_match.is_some()
            || p.if_modified_since.is_some()
            || p.if_unmodified_since.is_some()
    }
}

/// The fields a cache takes off a request before it fetches the whole response itself.
fn fetch_strips(n: &[u8]) -> bool {
    [&b"if-match"[..], b"if-none-match", b"if-modified-since", b"if-unmodified-since", b"range", b"if-range"]
        .iter()
        .any(|s| n.eq_ignore_ascii_case(s))
}

/// Fields not kept in an entry: this hop's, the framing, and what is computed per answer.
fn not_kept(n: &HeaderName) -> bool {
    n == header::CONTENT_LENGTH
        || n == header::TRANSFER_ENCODING
        || n == header::CONNECTION
        || n == header::AGE
        || n == header::DATE
        || n == header::SERVER
        || n == header::SET_COOKIE
        || n.as_str() == "keep-alive"
        || n.as_str() == "proxy-connection"
}

impl RouteCache {
    /// The route's cache over its zone (created, or the running one).
    ///
    /// # Errors
    /// The zone's directory cannot be created.
    pub fn new(cfg: &RouteCacheConfig, zones: &[ZoneConfig], matchers: &Matchers) -> std::io::Result<RouteCache> {
        let zc = match &cfg.zone {
            ZoneRef::Own(z) => z.as_ref(),
            ZoneRef::Named(n) => zones
                .iter()
                .find(|z| &z.name == n)
                .ok_or_else(|| std::io::Error::other(format!("cache zone {n:?} is not defined")))?,
        };
        let zone = Zone::get_or_create(zc)?;
        Ok(RouteCache {
            zone,
            key: cfg.key.clone(),
            bypass: cfg.bypass.clone(),
            no_store: cfg.no_store.clone(),
            matchers: if cfg.bypass.is_some() || cfg.no_store.is_some() {
                matchers.clone()
            } else {
                Matchers::default()
            },
        })
    }

    /// The request's directives this cache follows: all of them with `client_directives`;
    /// else only `no-store` and `only-if-cached` (a client cannot send every request to
    /// the upstream with `no-cache` or `max-age=0`, as with nginx and Varnish).
    fn directives(&self, asks: &Asks<'_>) -> RequestDirectives {
        let d = asks.directives();
        if self.zone.limits.client_directives.load(Ordering::Relaxed) {
            return d;
        }
        RequestDirectives { no_store: d.no_store, only_if_cached: d.only_if_cached, ..RequestDirectives::default() }
    }

    /// The zone's name.
    pub fn zone_name(&self) -> String {
        self.zone.name()
    }

    /// The request's key.
    fn key(&self, req: &Request) -> Vec<u8> {
        if let Some(t) = &self.key {
            return t.render(req, Context::Url, None);
        }
        key_for(req, req.path_bytes(), req.query_bytes())
    }

    fn matches(&self, m: &Option<Match>, req: &Request) -> bool {
        m.as_ref().is_some_and(|m| self.matchers.check(m, req, &crate::path::without_parameters(req.path_bytes())))
    }

    /// A fresh stored answer to `req`, at once; `None`: the request waits for
    /// [`RouteCache::serve`] (a miss, a stale entry, a method or directive that needs the
    /// upstream).
    pub fn hit_now(&self, req: &Request) -> Option<Response> {
        let m = req.method();
        if (*m != Method::GET && *m != Method::HEAD) || req.upgrade().is_some() || self.matches(&self.bypass, req) {
            return None;
        }
        let asks = Asks::of(req);
        let dirs = self.directives(&asks);
        let e = match &self.key {
            Some(_) => {
                let key = self.key(req);
                self.zone.store.get(self.zone.store.hash(&key), &key, |e| variant_matches(e, req))
            }
            // The default key in a kept buffer: no allocation on a hit.
            None => KEY.with_borrow_mut(|key| {
                key.clear();
                key_into(req, req.path_bytes(), req.query_bytes(), key);
                self.zone.store.get(self.zone.store.hash(key), key, |e| variant_matches(e, req))
            }),
        }?;
        let now = now();
        match control::usable(&e.stored, e.lifetime, &dirs, now) {
            Use::Fresh { .. } => {
                self.zone.stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(answer(&e, req, &asks, now, &Note::Hit))
            }
            _ => None,
        }
    }

    /// Serves `req` through the cache: a stored answer, or the upstream's through `fetch`
    /// (stored when it may be).
    pub async fn serve(&self, mut req: Request, fetch: Fetch) -> Response {
        let zone = &self.zone;
        let m = req.method().clone();
        if (m != Method::GET && m != Method::HEAD) || req.upgrade().is_some() {
            zone.stats.bypass.fetch_add(1, Ordering::Relaxed);
            let safe = m == Method::OPTIONS || m == Method::TRACE || req.upgrade().is_some();
            let keys = (!safe).then(|| (self.key(&req), origin_of(&req)));
            let res = fetch(req).await;
            if let (Some((key, origin)), true) = (keys, (200..400).contains(&res.status().as_u16())) {
                self.invalidate(&key, &origin, &res);
            }
            return with_status(res, "fwd=method");
        }
        if self.matches(&self.bypass, &req) {
            zone.stats.bypass.fetch_add(1, Ordering::Relaxed);
            return with_status(fetch(req).await, "fwd=bypass");
        }
        let key = self.key(&req);
        let hash = zone.store.hash(&key);
        let no_store = self.matches(&self.no_store, &req);
        let mut collapsed = false;
        let mut unled = "";
        loop {
            let (dirs, found) = {
                let asks = Asks::of(&req);
                let dirs = self.directives(&asks);
                let found = zone.store.get(hash, &key, |e| variant_matches(e, &req));
                (dirs, found)
            };
            let now = now();
            let mut stale = None;
            if let Some(e) = found {
                match control::usable(&e.stored, e.lifetime, &dirs, now) {
                    Use::Fresh { .. } => {
                        zone.stats.hits.fetch_add(1, Ordering::Relaxed);
                        let note = if collapsed { Note::Collapsed } else { Note::Hit };
                        return answer(&e, &req, &Asks::of(&req), now, &note);
                    }
                    Use::StaleWhileRevalidate => {
                        zone.stats.stale.fetch_add(1, Ordering::Relaxed);
                        if let Some(guard) = self.lead(hash) {
                            let job = self.job(&req, key.clone(), hash, Some(e.clone()), no_store);
                            let up = upstream_request(&req, Some(&e));
                            let fetch = fetch.clone();
                            tokio::spawn(async move {
                                let res = fetch(up).await;
                                job.take(res, guard).await;
                            });
                        }
                        return answer(&e, &req, &Asks::of(&req), now, &Note::StaleRevalidating);
                    }
                    Use::Revalidate => stale = Some(e),
                }
            }
            if dirs.only_if_cached {
                return with_status(Response::error(StatusCode::GATEWAY_TIMEOUT), "fwd=miss; detail=only-if-cached");
            }
            // A HEAD nothing fresh answers goes upstream as it is (a GET fills the cache).
            if m == Method::HEAD {
                zone.stats.misses.fetch_add(1, Ordering::Relaxed);
                return with_status(fetch(req).await, "fwd=uri-miss; detail=head");
            }
            // One fetch per key: the others wait for it, then look again.
            let guard = match self.lead(hash) {
                Some(g) => Some(g),
                None if !collapsed => {
                    collapsed = true;
                    match self.wait(hash).await {
                        Waited::Done => continue,
                        Waited::TimedOut => unled = "lock-timeout",
                        Waited::Full => unled = "lock-waiters",
                    }
                    None
                }
                // The fetch waited for stored nothing, and another request leads now.
                None => {
                    unled = "not-stored";
                    None
                }
            };
            let job = self.job(&req, key.clone(), hash, stale.clone(), no_store);
            let up = {
                let mut up = req.head_copy();
                *up.body_mut() = req.take_body();
                strip_for_fetch(up, stale.as_deref())
            };
            let res = fetch(up).await;
            return match guard {
                Some(g) => job.answer(res, g, &req),
                None => with_status(res, &format!("fwd=uri-miss; detail={unled}")),
            };
        }
    }

    /// Becomes the one fetch of `hash`, unless another is in flight.
    fn lead(&self, hash: u64) -> Option<FlightGuard> {
        let mut f = self.zone.flights.lock().unwrap_or_else(|p| p.into_inner());
        if f.contains_key(&hash) {
            return None;
        }
        f.insert(hash, Arc::new(Flight::default()));
        Some(FlightGuard { zone: self.zone.clone(), hash })
    }

    /// Waits for the fetch of `hash` in flight (within `lock_timeout`).
    async fn wait(&self, hash: u64) -> Waited {
        let zone = &self.zone;
        let flight = {
            let f = zone.flights.lock().unwrap_or_else(|p| p.into_inner());
            let Some(flight) = f.get(&hash).cloned() else { return Waited::Done };
            if flight.waiters.fetch_add(1, Ordering::Relaxed) >= zone.limits.lock_waiters.load(Ordering::Relaxed) {
                flight.waiters.fetch_sub(1, Ordering::Relaxed);
                return Waited::Full;
            }
            flight
        };
        zone.stats.collapsed.fetch_add(1, Ordering::Relaxed);
        let timeout = Duration::from_millis(zone.limits.lock_timeout_ms.load(Ordering::Relaxed));
        let done = flight.done.notified();
        tokio::pin!(done);
        // Registered before looking whether the flight is still there: a release between
        // the two wakes this waiter.
        done.as_mut().enable();
        let still = {
            let f = zone.flights.lock().unwrap_or_else(|p| p.into_inner());
            f.get(&hash).is_some_and(|f| Arc::ptr_eq(f, &flight))
        };
        let ok = !still || tokio::time::timeout(timeout, done).await.is_ok();
        flight.waiters.fetch_sub(1, Ordering::Relaxed);
        if ok {
            Waited::Done
        } else {
            Waited::TimedOut
        }
    }

    fn job(&self, req: &Request, key: Vec<u8>, hash: u64, stale: Option<Arc<Entry>>, no_store: bool) -> Job {
        let asks = Asks::of(req);
        let dirs = self.directives(&asks);
        Job {
            zone: self.zone.clone(),
            key,
            hash,
            stale,
            asked: Asked { authorization: asks.authorization, no_store: dirs.no_store || no_store },
            dirs,
            request_time: now(),
            variant_req: variant_fields(req),
        }
    }

    /// After an unsafe method succeeded: the stored responses of its target, and of the
    /// `Location` and `Content-Location` on the same host (RFC 9111 §4.4).
    fn invalidate(&self, key: &[u8], origin: &[u8], res: &Response) {
        let zone = &self.zone;
        zone.purge(Some(key), None);
        if self.key.is_some() {
            return;
        }
        for name in [header::LOCATION, header::CONTENT_LOCATION] {
            let Some(v) = res.header_value(&name) else { continue };
            let v = v.as_bytes();
            let path = if v.starts_with(b"/") && !v.starts_with(b"//") {
                v
            } else if v.len() > origin.len()
                && v[..origin.len()].eq_ignore_ascii_case(origin)
                && v[origin.len()] == b'/'
            {
                &v[origin.len()..]
            } else {
                continue;
            };
            let (p, q) = match path.iter().position(|&b| b == b'?') {
                Some(i) => (&path[..i], Some(&path[i + 1..])),
                None => (path, None),
            };
            let mut k = origin.to_vec();
            k.extend_from_slice(p);
            if let Some(q) = q {
                k.push(b'?');
                k.extend_from_slice(q);
            }
            zone.purge(Some(&k), None);
        }
    }
}

/// `scheme://authority` of a request, the authority byte for byte as the client sent it
/// (port, case and a trailing dot included): the upstream sees it too (`Host`,
/// `X-Forwarded-Host`), so an answer built from it is never shared with a request that
/// sent another.
fn origin_of(req: &Request) -> Vec<u8> {
    let mut k = Vec::with_capacity(64);
    origin_into(req, &mut k);
    k
}

fn origin_into(req: &Request, k: &mut Vec<u8>) {
    k.extend_from_slice(if req.is_secure() { b"https://" } else { b"http://" });
    k.extend_from_slice(req.authority_bytes().unwrap_or_default());
}

thread_local! {
    /// A hit's default key is built here.
    static KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The default key: `scheme://host/path?query`, on the normalized path.
fn key_for(req: &Request, path: &[u8], query: Option<&[u8]>) -> Vec<u8> {
    let mut k = Vec::with_capacity(64);
    key_into(req, path, query, &mut k);
    k
}

fn key_into(req: &Request, path: &[u8], query: Option<&[u8]>, k: &mut Vec<u8>) {
    origin_into(req, k);
    k.extend_from_slice(path);
    if let Some(q) = query {
        k.push(b'?');
        k.extend_from_slice(q);
    }
}

/// An `Age` value: below [`AGES`] seconds a slice of one string made once, so that a hit
/// formats and allocates nothing.
fn age_value(age: Secs) -> HeaderValue {
    static DIGITS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if age >= AGES {
        return HeaderValue::from(age);
    }
    let all = DIGITS.get_or_init(|| (0..AGES).map(|n| n.to_string()).collect());
    // 0–9 take one digit each, 10–99 two, 100–999 three.
    let (at, len) = match age {
        0..10 => (age, 1),
        10..100 => (10 + (age - 10) * 2, 2),
        _ => (190 + (age - 100) * 3, 3),
    };
    let (at, len) = (at as usize, len as usize);
    HeaderValue::from_static(&all[at..at + len])
}

/// Ages [`age_value`] keeps.
const AGES: Secs = 1000;

/// A request's copy of the fields any `Vary` may name (all of them, lower-cased names).
fn variant_fields(req: &Request) -> Vec<(String, Vec<u8>)> {
    req.header_bytes().map(|(n, v)| (String::from_utf8_lossy(n).to_ascii_lowercase(), v.to_vec())).collect()
}

/// The variant `names` make of a request's fields.
fn variant_of<'a>(names: &[String], lines: impl Fn(&str) -> Vec<&'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for n in names {
        control::vary_value(n, &lines(n), &mut out);
        out.push(0);
    }
    out
}

/// Whether `req` is the variant `e` stored.
fn variant_matches(e: &Entry, req: &Request) -> bool {
    if e.vary.is_empty() {
        return true;
    }
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    // Without allocating on a hit: the lines of each field on the stack (a request with
    // more of one field than that is compared the long way), the value in a kept buffer.
    const MAX_LINES: usize = 8;
    let mut stored = e.variant.split(|&b| b == 0);
    BUF.with_borrow_mut(|out| {
        e.vary.iter().all(|n| {
            let mut lines: [&[u8]; MAX_LINES] = [&[]; MAX_LINES];
            let mut k = 0;
            for (h, v) in req.header_bytes() {
                if h.eq_ignore_ascii_case(n.as_bytes()) {
                    if k == MAX_LINES {
                        let all: Vec<&[u8]> = req
                            .header_bytes()
                            .filter(|(h, _)| h.eq_ignore_ascii_case(n.as_bytes()))
                            .map(|(_, v)| v)
                            .collect();
                        out.clear();
                        control::vary_value(n, &all, out);
                        return stored.next() == Some(&out[..]);
                    }
                    lines[k] = v;
                    k += 1;
                }
            }
            out.clear();
            control::vary_value(n, &lines[..k], out);
            stored.next() == Some(&out[..])
        })
    })
}

/// `req` made the cache's fetch: the client's conditionals and ranges off (the cache
/// wants the whole response), and the stored entry's validators on when revalidating.
fn strip_for_fetch(mut up: Request, stale: Option<&Entry>) -> Request {
    let mut add: Vec<(&[u8], Vec<u8>)> = Vec::new();
    if let Some(e) = stale {
        if let Some(t) = &e.etag {
            add.push((b"if-none-match", t.as_bytes().to_vec()));
        }
        if let Some(lm) = e.fields.fields().iter().find(|(n, _)| n == header::LAST_MODIFIED) {
            add.push((b"if-modified-since", lm.1.as_bytes().to_vec()));
        }
    }
    let needs = up.header_bytes().any(|(n, _)| fetch_strips(n)) || !add.is_empty();
    if needs {
        let add: Vec<(&[u8], &[u8])> = add.iter().map(|(n, v)| (*n, &v[..])).collect();
        let _ = up.rewrite_headers(fetch_strips, &add);
    }
    up
}

/// A request for a background revalidation of `e`.
fn upstream_request(req: &Request, e: Option<&Entry>) -> Request {
    let mut up = strip_for_fetch(req.head_copy(), e);
    up.set_method(Method::GET);
    up
}

/// How a wait for another request's fetch ended.
enum Waited {
    /// The fetch ended (stored or not): look again.
    Done,
    /// `lock_timeout` passed.
    TimedOut,
    /// `lock_waiters` were waiting already.
    Full,
}

/// Ends a fetch's flight: the requests waiting for it look again.
struct FlightGuard {
    zone: Arc<Zone>,
    hash: u64,
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        let f = self.zone.flights.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.hash);
        if let Some(f) = f {
            f.done.notify_waiters();
        }
    }
}

/// What a fetch needs to store its answer, owned (a background fetch outlives its request).
struct Job {
    zone: Arc<Zone>,
    key: Vec<u8>,
    hash: u64,
    stale: Option<Arc<Entry>>,
    asked: Asked,
    dirs: RequestDirectives,
    request_time: Secs,
    variant_req: Vec<(String, Vec<u8>)>,
}

/// What `Cache-Status` says of an answer from the cache.
enum Note {
    Hit,
    Collapsed,
    StaleRevalidating,
    Revalidated { ttl: Secs },
    StaleOnError(u16),
}

impl Job {
    /// The upstream's answer to the client: stored while it is sent when it may be (or
    /// the stored entry, after a `304` or an error `stale-if-error` covers).
    fn answer(self, res: Response, guard: FlightGuard, req: &Request) -> Response {
        let zone = self.zone.clone();
        let status = res.status().as_u16();
        if let Some(e) = self.stale.clone() {
            if status == 304 {
                if let Some(e2) = self.updated(&e, &res) {
                    drop(guard);
                    zone.stats.revalidated.fetch_add(1, Ordering::Relaxed);
                    let now = now();
                    let ttl = e2.lifetime.saturating_sub(control::current_age(&e2.stored, now));
                    return answer(&e2, req, &Asks::of(req), now, &Note::Revalidated { ttl });
                }
            }
            let now = now();
            if status >= 500 && control::stale_on_error(&e.stored, e.lifetime, &self.dirs, now, self.stale_if_error()) {
                zone.stats.stale.fetch_add(1, Ordering::Relaxed);
                return answer(&e, req, &Asks::of(req), now, &Note::StaleOnError(status));
            }
        }
        zone.stats.misses.fetch_add(1, Ordering::Relaxed);
        let fwd = if self.stale.is_some() { "fwd=stale" } else { "fwd=uri-miss" };
        match self.tap(&res, guard) {
            Err(why) => with_status(res, &format!("{fwd}; fwd-status={status}; detail={why}")),
            Ok(tap) => with_status(res.tap(Box::new(tap)), &format!("{fwd}; fwd-status={status}; stored")),
        }
    }

    /// A background fetch's answer: stored (or the entry updated); nothing is sent.
    async fn take(self, res: Response, guard: FlightGuard) {
        let status = res.status().as_u16();
        if let (Some(e), 304) = (self.stale.clone(), status) {
            if self.updated(&e, &res).is_some() {
                self.zone.stats.revalidated.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if let Ok(tap) = self.tap(&res, guard) {
            let _ = res.tap(Box::new(tap)).run_body().await;
        }
    }

    fn stale_if_error(&self) -> Secs {
        self.zone.limits.stale_if_error.load(Ordering::Relaxed)
    }

    /// The entry `e` with the fields of a `304` that revalidated it (RFC 9111 §4.3.4), and
    /// fresh times; stored in its place.
    fn updated(&self, e: &Arc<Entry>, res: &Response) -> Option<Arc<Entry>> {
        let mut fields: Vec<(HeaderName, HeaderValue)> = e.fields.fields().to_vec();
        let new: Vec<&(HeaderName, HeaderValue)> =
            res.headers().filter(|(n, _)| !not_kept(n) && n != header::CONTENT_TYPE).collect();
        fields.retain(|(n, _)| !new.iter().any(|(m, _)| m == n));
        fields.extend(new.into_iter().cloned());
        let parts = Parts {
            key: e.key.to_vec(),
            variant: e.variant.to_vec(),
            status: e.status,
            fields,
            request_time: self.request_time,
            response_time: now(),
            age: stored_of(res.headers(), 0, 0).age,
            date: None,
        };
        let file = e.file.clone().map(|f| (f, e.disk_size));
        let ne = make_entry(&self.zone, parts, e.body.clone(), file)?;
        let hash = self.hash;
        if !self.zone.store.insert(hash, ne) {
            return None;
        }
        self.zone.store.get(hash, &self.key, |x| x.variant == e.variant)
    }

    /// A tap that stores `res`, or why it is not stored.
    fn tap(&self, res: &Response, guard: FlightGuard) -> Result<StoreTap, &'static str> {
        let zone = &self.zone;
        let mut set_cookie = false;
        let mut vary_lines: Vec<&[u8]> = Vec::new();
        let mut length = None;
        for (n, v) in res.headers() {
            if n == header::SET_COOKIE {
                set_cookie = true;
            } else if n == header::VARY {
                vary_lines.push(v.as_bytes());
            } else if n == header::CONTENT_LENGTH {
                length = std::str::from_utf8(v.as_bytes()).ok().and_then(|s| s.trim().parse::<u64>().ok());
            }
        }
        let vary = control::vary_names(&vary_lines);
        let fields: Vec<(HeaderName, HeaderValue)> = res.headers().filter(|(n, _)| !not_kept(n)).cloned().collect();
        let now = now();
        // Read from all the response's fields: `Age` and `Date` count, though not kept.
        let stored = stored_of(res.headers(), self.request_time, now);
        let answered = Answered { status: res.status().as_u16(), set_cookie, vary_any: vary.is_err() };
        control::storable(self.asked, answered, &stored, zone.heuristic()).map_err(NotStored::token)?;
        if matches!(res.body(), selvedge::ResponseBody::File(_)) {
            return Err(NotStored::Partial.token());
        }
        let max = zone.limits.max_entry.load(Ordering::Relaxed);
        let length = length.or(match res.body() {
            selvedge::ResponseBody::Bytes(b) => Some(b.len() as u64),
            selvedge::ResponseBody::Empty => Some(0),
            _ => None,
        });
        if length.is_some_and(|l| l > max) {
            return Err("too-large");
        }
        if !zone.used_enough(self.hash) {
            return Err("min-uses");
        }
        let names = vary.unwrap_or_default();
        let variant_req = &self.variant_req;
        let lines = |n: &str| variant_req.iter().filter(|(h, _)| h == n).map(|(_, v)| &v[..]).collect();
        let variant = variant_of(&names, lines);
        let parts = Parts {
            key: self.key.clone(),
            variant,
            status: res.status(),
            fields,
            request_time: self.request_time,
            response_time: now,
            age: stored.age,
            date: stored.date,
        };
        let spool = match &zone.dir {
            Some(dir) => {
                let head = FileHead {
                    key: parts.key.clone(),
                    variant: parts.variant.clone(),
                    status: parts.status.as_u16(),
                    request_time: parts.request_time,
                    response_time: parts.response_time,
                    age: parts.age,
                    date: parts.date,
                    fields: parts.fields.clone(),
                };
                match Spool::create(dir, self.hash, &head) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::warn!("cache {}: {e}", zone.name());
                        None
                    }
                }
            }
            None => None,
        };
        let mem_entry = zone.limits.mem_entry.load(Ordering::Relaxed).min(max);
        Ok(StoreTap {
            zone: zone.clone(),
            hash: self.hash,
            parts: Some(parts),
            buf: Some(BytesMut::with_capacity(length.unwrap_or(0).min(mem_entry) as usize)),
            mem_entry,
            max,
            seen: 0,
            spool,
            reserved: 0,
            guard: Some(guard),
        })
    }
}

/// Stores a response as it is sent: its body kept in memory (up to the zone's memory
/// entry size) and written to the disk tier's file, which counts against the disk's limit
/// as it grows; stored when it ended whole.
struct StoreTap {
    zone: Arc<Zone>,
    hash: u64,
    parts: Option<Parts>,
    buf: Option<BytesMut>,
    mem_entry: u64,
    max: u64,
    seen: u64,
    spool: Option<Spool>,
    /// Disk bytes counted for the file so far.
    reserved: u64,
    guard: Option<FlightGuard>,
}

impl StoreTap {
    /// Nothing more of this response is stored: what it held goes, and the requests
    /// waiting for it look again.
    fn give_up(&mut self) {
        self.parts = None;
        self.buf = None;
        self.spool = None;
        self.guard = None;
    }
}

impl BodyTap for StoreTap {
    fn data(&mut self, data: &[u8]) {
        if self.parts.is_none() {
            return;
        }
        self.seen += data.len() as u64;
        if self.seen > self.max {
            self.give_up();
            return;
        }
        if self.spool.is_some() {
            let n = data.len() as u64;
            if !self.zone.store.reserve_disk(n) {
                self.give_up();
                return;
            }
            self.reserved += n;
            if let Some(s) = self.spool.as_mut() {
                s.write(data);
            }
        }
        if self.seen > self.mem_entry {
            self.buf = None;
            if self.spool.is_none() {
                self.give_up();
            }
        } else if let Some(b) = self.buf.as_mut() {
            b.extend_from_slice(data);
        }
    }

    fn end(mut self: Box<Self>, complete: bool) {
        let (Some(parts), true) = (self.parts.take(), complete) else {
            self.give_up();
            return;
        };
        let zone = self.zone.clone();
        let file = match self.spool.take() {
            Some(s) => {
                let (at, total) = (s.body_at, s.written);
                s.finish().map(|p| (Arc::new(store::DiskFile::new(p.to_path_buf())), at, total))
            }
            None => None,
        };
        let body = match (self.buf.take(), &file) {
            // A buffer grown by doubling keeps its spare room when frozen: the entry holds
            // an exact copy instead.
            (Some(b), None) if b.len() as u64 >= store::OPEN_BODY_MIN => {
                match store::OpenBody::new(&std::env::temp_dir(), &b) {
                    Some(o) => Bodied::Open(Arc::new(o)),
                    None => Bodied::Mem(Bytes::copy_from_slice(&b)),
                }
            }
            (Some(b), _) if b.capacity() > b.len() + b.len() / 8 + 64 => Bodied::Mem(Bytes::copy_from_slice(&b)),
            (Some(b), _) => Bodied::Mem(b.freeze()),
            (None, Some((f, at, total))) => Bodied::Disk { file: f.clone(), offset: *at, len: total - at },
            (None, None) => return,
        };
        let file = file.map(|(f, _, total)| (f, total));
        if let Some(e) = make_entry(&zone, parts, body, file) {
            if zone.store.insert(self.hash, e) {
                zone.stats.stored.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The guard drops after the entry is in: the waiting requests find it.
        drop(self.guard.take());
    }
}

impl Drop for StoreTap {
    fn drop(&mut self) {
        self.zone.store.unreserve_disk(self.reserved);
    }
}

/// `res` with a `Cache-Status` of `note`.
fn with_status(res: Response, note: &str) -> Response {
    res.header(CACHE_STATUS.clone(), format!("selvedge; {note}"))
}

/// The answer from entry `e` to `req`: `304` when its conditionals hold, `206` for a
/// range, the whole response otherwise; with `Age` and `Cache-Status`.
fn answer(e: &Arc<Entry>, req: &Request, asks: &Asks<'_>, now: Secs, note: &Note) -> Response {
    let age = control::current_age(&e.stored, now);
    // A plain hit's is a constant: no formatting on the way that matters most.
    let status_text = match note {
        Note::Hit => HeaderValue::from_static("selvedge; hit"),
        Note::Collapsed => HeaderValue::from_static("selvedge; hit; collapsed"),
        Note::StaleRevalidating => HeaderValue::from_static("selvedge; hit; fwd=stale; detail=stale-while-revalidate"),
        Note::Revalidated { ttl } => HeaderValue::from_str(&format!("selvedge; fwd=stale; fwd-status=304; ttl={ttl}"))
            .unwrap_or(HeaderValue::from_static("selvedge; fwd=stale; fwd-status=304")),
        Note::StaleOnError(s) => {
            HeaderValue::from_str(&format!("selvedge; fwd=stale; fwd-status={s}; detail=stale-if-error"))
                .unwrap_or(HeaderValue::from_static("selvedge; fwd=stale; detail=stale-if-error"))
        }
    };
    let ok = e.status == StatusCode::OK;
    if asks.conditional() {
        let etag = e.etag.as_ref().map_or(&b""[..], HeaderValue::as_bytes);
        let modified = e.last_modified.unwrap_or(u64::MAX);
        let get_or_head = true;
        match conditional::evaluate(&asks.pre, get_or_head, etag, modified) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                let mut res = Response::new(StatusCode::NOT_MODIFIED);
                for (n, v) in e.fields.fields() {
                    if n == header::ETAG
                        || n == header::CACHE_CONTROL
                        || n == header::EXPIRES
                        || n == header::VARY
                        || n == header::CONTENT_LOCATION
                        || n == header::LAST_MODIFIED
                    {
                        res = res.header(n.clone(), v.clone());
                    }
                }
                return res.header(header::AGE, age_value(age)).header(CACHE_STATUS.clone(), status_text);
            }
            Precondition::Failed => {
                return Response::error(StatusCode::PRECONDITION_FAILED).header(CACHE_STATUS.clone(), status_text);
            }
        }
    }
    let size = e.body.len();
    let mut part = None;
    if let (true, Some(r)) = (ok, asks.range) {
        let etag = e.etag.as_ref().map_or(&b""[..], HeaderValue::as_bytes);
        let applies = asks.if_range.is_none_or(|v| range::if_range_matches(v, etag, e.last_modified.unwrap_or(0)));
        if applies {
            match range::parse(r, size) {
                Ranges::Satisfiable(v) if v.len() == 1 => part = Some(v[0]),
                Ranges::Unsatisfiable => {
                    return Response::new(StatusCode::RANGE_NOT_SATISFIABLE)
                        .header(header::CONTENT_RANGE, format!("bytes */{size}"))
                        .header(CACHE_STATUS.clone(), status_text);
                }
                // Several ranges: the whole response (a server may ignore Range).
                _ => {}
            }
        }
    }
    let (status, start, len) = match part {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.start, r.len),
        None => (e.status, 0, size),
    };
    let mut res = match &e.body {
        Bodied::Mem(b) => Response::bytes(status, b.slice(start as usize..(start + len) as usize)),
        Bodied::Open(o) => Response::file_range(status, o.file.clone(), start, len),
        Bodied::Disk { file, offset, .. } => match std::fs::File::open(file.path()) {
            Ok(f) => Response::file_range(status, Arc::new(f), offset + start, len),
            Err(_) => return with_status(Response::error(StatusCode::BAD_GATEWAY), "detail=disk-read"),
        },
    };
    let _ = req;
    if part.is_none() && matches!(note, Note::Hit) {
        return res.shared_fields(hit_fields(e, age, status_text));
    }
    res = res.shared_fields(e.fields.clone());
    if let Some(r) = part {
        res = res.header(header::CONTENT_RANGE, range::content_range(r, size));
    }
    res.header(header::AGE, age_value(age)).header(CACHE_STATUS.clone(), status_text)
}

/// A plain hit's fields: the entry's, `Age` and `Cache-Status`. Each thread keeps them for
/// the entries it answered last (a small table by entry, for the current age), so that a
/// hit's answer carries shared fields only: nothing is pushed or dropped per answer, and
/// HTTP/2 sends again a head it has encoded before.
fn hit_fields(e: &Arc<Entry>, age: Secs, status: HeaderValue) -> Arc<SharedFields> {
    type Slot = Option<(std::sync::Weak<Entry>, Secs, Arc<SharedFields>)>;
    const SLOTS: usize = 64;
    thread_local! {
        static HITS: std::cell::RefCell<Vec<Slot>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let i = (Arc::as_ptr(e) as usize >> 7) % SLOTS;
    HITS.with_borrow_mut(|slots| {
        if slots.is_empty() {
            slots.resize(SLOTS, None);
        }
        // The weak reference keeps the entry's allocation, so an equal address is the same
        // entry (an entry's fields never change).
        if let Some((w, a, f)) = &slots[i] {
            if *a == age && std::ptr::eq(w.as_ptr(), Arc::as_ptr(e)) {
                return f.clone();
            }
        }
        let own = [(header::AGE, age_value(age)), (CACHE_STATUS.clone(), status)];
        let f = Arc::new(SharedFields::new(e.fields.fields().iter().cloned().chain(own)));
        slots[i] = Some((Arc::downgrade(e), age, f.clone()));
        f
    })
}

/// Purges through the admin listener: `key` or `prefix` in `zone` (every zone when
/// `None`). How many entries went.
pub fn purge(zone: Option<&str>, key: Option<&[u8]>, prefix: Option<&[u8]>) -> usize {
    all_zones().iter().filter(|z| zone.is_none_or(|n| z.name() == n)).map(|z| z.purge(key, prefix)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_values_are_the_decimal_numbers() {
        for age in [0, 1, 9, 10, 11, 99, 100, 101, 998, 999, 1000, 1001, 86_400, u64::MAX] {
            assert_eq!(age_value(age).as_bytes(), age.to_string().as_bytes(), "{age}");
        }
        for age in 0..AGES {
            assert_eq!(age_value(age).to_str().unwrap().parse::<u64>().unwrap(), age);
        }
    }
}
