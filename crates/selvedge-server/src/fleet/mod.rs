//! A fleet of servers (`[fleet]`): instances that share state through one Redis or Valkey
//! server, so a client may land on any of them.
//!
//! What is shared, each in its own module:
//! - [`tickets`]: the TLS session ticket keys (a ticket one instance issued resumes on
//!   every other; keys are made by whichever instance comes first, rotated on a schedule
//!   and never written to disk by selvedge);
//! - [`rate`]: `rate = { scope = "fleet" }` limits, counted in Redis by the same GCRA the
//!   local limiter uses, with local leases and remembered refusals so that most requests
//!   need no round trip, and the local limiter (its limit divided among the instances) as
//!   soon as Redis does not answer within `timeout`;
//! - [`members`]: heartbeats with a time to live, read by the admin listener's `GET /fleet`;
//! - [`events`]: cache purges and configuration API changes made on one instance, made on
//!   every other.
//!
//! All Redis traffic runs on one thread of its own (`selvedge-fleet`); a request that needs
//! an answer waits for it at most `timeout` (default 5 ms) and is never failed for want of
//! it. Without `[fleet]` none of this exists.

pub mod events;
mod link;
pub mod members;
pub mod rate;
pub mod tickets;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

pub use link::{block, Link};

use crate::units::{Count, NonZeroDur};

/// `[fleet]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleet {
    redis: String,
    prefix: Option<String>,
    instance: Option<String>,
    timeout: Option<NonZeroDur>,
    connections: Option<Count<1, 64>>,
    heartbeat: Option<NonZeroDur>,
    ticket_rotation: Option<NonZeroDur>,
    instances: Option<Count<1, 10_000>>,
    share_config: Option<bool>,
    acme_storage: Option<bool>,
    sentinels: Option<Vec<String>>,
    sentinel_master: Option<String>,
}

/// `[fleet]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    /// `redis://`, `rediss://` (TLS) or `unix://` URL, with a user and password if the
    /// server wants them (`redis://user:password@host:port/db`).
    pub redis: String,
    /// Put before every key and channel name: `"selvedge:"`.
    pub prefix: String,
    /// This instance's name in `GET /fleet`: the host name and process id.
    pub instance: String,
    /// The longest a request waits for Redis: 5 ms.
    pub timeout: Duration,
    /// Connections to Redis, each multiplexed (pipelined): 2.
    pub connections: usize,
    /// How often an instance says it is alive (it is gone after three missed): 1 s.
    pub heartbeat: Duration,
    /// How long one TLS session ticket key encrypts new tickets: 12 h.
    pub ticket_rotation: Duration,
    /// Instances a fleet limit is divided among while Redis is unreachable (`None`: the
    /// number of live instances last seen).
    pub instances: Option<u32>,
    /// Whether configuration API changes go to every instance: true.
    pub share_config: bool,
    /// Whether ACME keeps its account, certificates, locks and challenge answers in Redis
    /// (with `[acme]`): true.
    pub acme_storage: bool,
    /// Redis Sentinels (`host:port`) that name the primary; `None`: `redis` is the server.
    pub sentinels: Option<Vec<String>>,
    /// The primary's name at the sentinels: `"mymaster"`.
    pub sentinel_master: String,
}

/// The shortest `ticket_rotation` taken.
const MIN_ROTATION: Duration = Duration::from_secs(1);

impl FleetConfig {
    /// Checks `[fleet]` as written.
    ///
    /// # Errors
    /// A URL the Redis client does not take, an empty prefix or instance name, a rotation
    /// under one second.
    pub fn from_raw(r: &RawFleet) -> Result<FleetConfig, String> {
        if let Err(e) = redis::Client::open(r.redis.as_str()) {
            return Err(format!("[fleet] redis: not a Redis URL: {e}"));
        }
        let prefix = r.prefix.clone().unwrap_or_else(|| "selvedge:".into());
        if prefix.is_empty() || prefix.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err("[fleet] prefix: one or more visible ASCII characters".into());
        }
        let instance = match &r.instance {
            Some(i) if i.is_empty() || i.len() > 200 || i.bytes().any(|b| !b.is_ascii_graphic()) => {
                return Err("[fleet] instance: 1 to 200 visible ASCII characters".into())
            }
            Some(i) => i.clone(),
            None => default_instance(),
        };
        if let Some(list) = &r.sentinels {
            let bad =
                list.iter().find(|a| a.rsplit_once(':').is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err()));
            if list.is_empty() || bad.is_some() {
                return Err("[fleet] sentinels: one or more \"host:port\" addresses".into());
            }
        }
        let ticket_rotation = r.ticket_rotation.map_or(Duration::from_secs(12 * 3600), NonZeroDur::get);
        if ticket_rotation < MIN_ROTATION {
            return Err("[fleet] ticket_rotation: at least 1s".into());
        }
        Ok(FleetConfig {
            redis: r.redis.clone(),
            prefix,
            instance,
            timeout: r.timeout.map_or(Duration::from_millis(5), NonZeroDur::get),
            connections: r.connections.map_or(2, Count::get_usize),
            heartbeat: r.heartbeat.map_or(Duration::from_secs(1), NonZeroDur::get),
            ticket_rotation,
            instances: r.instances.map(Count::get_u32),
            share_config: r.share_config.unwrap_or(true),
            acme_storage: r.acme_storage.unwrap_or(true),
            sentinels: r.sentinels.clone(),
            sentinel_master: r.sentinel_master.clone().unwrap_or_else(|| "mymaster".into()),
        })
    }
}

/// `host:pid`: the machine's name and the process id.
fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    let host = if host.is_empty() { "selvedge" } else { host };
    format!("{host}:{}", std::process::id())
}

/// Counters of the fleet's work, on `/metrics`.
#[derive(Debug, Default)]
pub struct FleetStats {
    /// Calls to Redis that failed or did not answer in time.
    pub redis_errors: AtomicU64,
    /// Requests whose fleet limit needed a round trip to Redis.
    pub rate_asks: AtomicU64,
    /// Of those, the round trips made on a worker's own connection.
    pub rate_asks_on_workers: AtomicU64,
    /// Requests whose fleet limit was decided by the local limiter (Redis unreachable).
    pub rate_fallbacks: AtomicU64,
    /// Live instances at the last heartbeat (this one included).
    pub members: AtomicU64,
    /// Events (purges, configuration changes) received from other instances.
    pub events_received: AtomicU64,
}

/// The running fleet link of this process.
#[derive(Debug)]
pub struct Fleet {
    /// The settings it started with (a reload does not change them).
    pub cfg: FleetConfig,
    /// The connections to Redis.
    pub link: Arc<Link>,
    /// The shared TLS session ticket keys.
    pub tickets: Arc<tickets::SharedTickets>,
    /// Counters.
    pub stats: FleetStats,
    /// What the heartbeats say of this instance.
    about: std::sync::Mutex<members::About>,
}

static FLEET: OnceLock<Arc<Fleet>> = OnceLock::new();

/// The fleet link, once [`start`]ed.
pub fn get() -> Option<&'static Arc<Fleet>> {
    FLEET.get()
}

/// Starts the fleet thread: connections (made lazily, so an unreachable Redis does not stop
/// the start), heartbeats, ticket keys, the event subscription.
///
/// # Errors
/// The thread or its runtime could not start, or it was started before.
pub fn start(cfg: &FleetConfig) -> std::io::Result<Arc<Fleet>> {
    // rediss:// builds its rustls client on the process's provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let link = rt.block_on(async { Link::open(cfg) }).map_err(std::io::Error::other)?;
    let fleet = Arc::new(Fleet {
        cfg: cfg.clone(),
        link: Arc::new(link),
        tickets: Arc::new(tickets::SharedTickets::new(cfg.ticket_rotation)),
        stats: FleetStats::default(),
        about: std::sync::Mutex::new(members::About::default()),
    });
    if FLEET.set(fleet.clone()).is_err() {
        return Err(std::io::Error::other("the fleet link is already running"));
    }
    // With sentinels, the primary is known before anything asks Redis (a request or the
    // admin listener would otherwise reach the `redis` address first and find it down).
    let f0 = fleet.clone();
    rt.block_on(async move {
        if let Err(e) = f0.link.resolve().await {
            tracing::warn!("fleet: {e}; trying the redis address until they answer");
        }
    });
    let f = fleet.clone();
    std::thread::Builder::new().name("selvedge-fleet".into()).spawn(move || {
        link::on_fleet_thread();
        rt.block_on(async move {
            f.link.set_runtime(tokio::runtime::Handle::current());
            tokio::spawn(tickets::keep(f.clone()));
            tokio::spawn(members::beat(f.clone()));
            events::listen(f).await;
        });
    })?;
    tracing::info!(instance = cfg.instance, redis = redacted_url(&cfg.redis), "fleet: sharing state through Redis");
    Ok(fleet)
}

/// `url` without its password, for logs.
pub fn redacted_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// The key or channel `name` under the configured prefix.
pub fn key(prefix: &str, name: &str) -> String {
    let mut k = String::with_capacity(prefix.len() + name.len());
    k.push_str(prefix);
    k.push_str(name);
    k
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Fleet {
    /// Sets what the heartbeats say of this instance (its listeners, once bound).
    pub fn set_about(&self, about: members::About) {
        *self.about.lock().unwrap_or_else(|p| p.into_inner()) = about;
    }

    pub(crate) fn about(&self) -> members::About {
        self.about.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Counts a failed or late call to Redis.
    pub(crate) fn count_error(&self) {
        self.stats.redis_errors.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_left_out_of_logs() {
        assert_eq!(redacted_url("redis://u:secret@10.0.0.1:6379/0"), "redis://u:***@10.0.0.1:6379/0");
        assert_eq!(redacted_url("rediss://:secret@h/1"), "rediss://:***@h/1");
        assert_eq!(redacted_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn settings_are_checked() {
        let raw = |t: &str| toml::from_str::<RawFleet>(t).unwrap();
        let c = FleetConfig::from_raw(&raw("redis = \"redis://127.0.0.1:6379/0\"")).unwrap();
        assert_eq!((c.prefix.as_str(), c.timeout, c.connections), ("selvedge:", Duration::from_millis(5), 2));
        assert!(FleetConfig::from_raw(&raw("redis = \"http://x\"")).is_err());
        assert!(FleetConfig::from_raw(&raw("redis = \"redis://h\"\nprefix = \"a b\"")).is_err());
        assert!(FleetConfig::from_raw(&raw("redis = \"redis://h\"\nticket_rotation = \"500ms\"")).is_err());
        assert!(toml::from_str::<RawFleet>("redis = \"redis://h\"\nbogus = 1").is_err());
    }
}
