//! The connections to Redis: a few multiplexed connections (each pipelines the commands of
//! every caller), taken in turn, that reconnect by themselves with backoff; whether Redis
//! answers now; and calls bounded in time.
//!
//! A call that fails (refused, reset, an error answer: Redis cannot count), or
//! [`LATE_IN_A_ROW`] calls in a row that do not answer in time, mark Redis down: from then
//! on the request paths do not ask it (they use their local fallbacks at once). It stays
//! down for at least a hold time, 1 s, doubled (up to [`MAX_HOLD`]) each time it goes down
//! again within [`STABLE`] of coming back, so a Redis that flaps does not flip the limits
//! back and forth (each flip would hand out a fresh burst). Then a probe on the fleet
//! thread pings it on a connection of its own (a connection that read a reply it could not
//! parse stays broken) with backoff until it answers, makes the connections anew, and marks
//! it up again. Each change is logged once. A single late answer is decided locally but
//! does not mark Redis down: on a loaded machine one reply in many comes late.
//!
//! The request paths' round trips (fleet rate limits) run on the worker that needs them,
//! on a connection of that worker's own ([`Link::own`]), so that neither the question nor
//! the answer wakes another thread. A request's late or missing answer is only a
//! suspicion (its worker may have been busy with other requests when the answer came):
//! the fleet thread pings Redis with the same budget ([`Link::suspect`]), and that ping's
//! time counts.

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::AsyncConnectionConfig;
use redis::IntoConnectionInfo;

use super::FleetConfig;

/// How long the background work (heartbeats, keys, events) waits for an answer.
pub(crate) const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(2);

/// Late answers in a row that mark Redis down.
pub const LATE_IN_A_ROW: u32 = 3;
/// The longest Redis is held down after it flapped.
pub const MAX_HOLD: Duration = Duration::from_secs(30);
/// Up this long, and the hold time starts from 1 s again.
pub const STABLE: Duration = Duration::from_secs(60);

/// The connections to Redis.
pub struct Link {
    late: std::sync::atomic::AtomicU32,
    conns: ArcSwap<Vec<ConnectionManager>>,
    /// Bumped whenever the connections are made anew (a new primary, Redis back): the
    /// workers' own connections follow.
    generation: AtomicU64,
    next: AtomicUsize,
    up: AtomicBool,
    probing: AtomicBool,
    /// A ping for [`Link::suspect`] is under way.
    checking: AtomicBool,
    /// The longest a request waits.
    pub timeout: Duration,
    /// The client of the primary, for connections of their own (pub/sub).
    client: ArcSwap<redis::Client>,
    /// With `sentinels`: who says which server is the primary.
    sentinel: Option<tokio::sync::Mutex<SentinelClient>>,
    mc: ConnectionManagerConfig,
    size: usize,
    rt: OnceLock<tokio::runtime::Handle>,
    /// When Redis last came back, and the hold time of the next fall.
    came_back: std::sync::Mutex<(Option<std::time::Instant>, Duration)>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("up", &self.is_up()).field("connections", &self.size).finish()
    }
}

impl Link {
    /// The connections of `cfg`, made on first use (inside a Tokio runtime).
    ///
    /// # Errors
    /// The URL is not one the client takes.
    pub fn open(cfg: &FleetConfig) -> Result<Link, String> {
        let client = redis::Client::open(cfg.redis.as_str()).map_err(|e| format!("[fleet] redis: {e}"))?;
        let mc = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(BACKGROUND_TIMEOUT))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let conns = managers(&client, &mc, cfg.connections).map_err(|e| format!("[fleet] redis: {e}"))?;
        let sentinel = match &cfg.sentinels {
            Some(list) => Some(tokio::sync::Mutex::new(sentinel_client(cfg, list)?)),
            None => None,
        };
        Ok(Link {
            late: std::sync::atomic::AtomicU32::new(0),
            conns: ArcSwap::from_pointee(conns),
            generation: AtomicU64::new(0),
            next: AtomicUsize::new(0),
            up: AtomicBool::new(true),
            probing: AtomicBool::new(false),
            checking: AtomicBool::new(false),
            timeout: cfg.timeout,
            client: ArcSwap::from_pointee(client),
            sentinel,
            mc,
            size: cfg.connections,
            rt: OnceLock::new(),
            came_back: std::sync::Mutex::new((None, Duration::from_secs(1))),
        })
    }

    /// The primary's client (for a connection of its own).
    pub fn client(&self) -> Arc<redis::Client> {
        self.client.load_full()
    }

    /// With `sentinels`: asks them which server is the primary and, if it moved, connects
    /// there (on the fleet thread). Without: nothing to do.
    ///
    /// # Errors
    /// No sentinel answered with a primary.
    pub async fn resolve(&self) -> Result<(), String> {
        let Some(s) = &self.sentinel else { return Ok(()) };
        let mut s = s.lock().await;
        let client = match tokio::time::timeout(BACKGROUND_TIMEOUT, s.async_get_client()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(format!("sentinels: {e}")),
            Err(_) => return Err("sentinels: no answer".into()),
        };
        let (now, was) = (
            client.get_connection_info().addr().to_string(),
            self.client.load().get_connection_info().addr().to_string(),
        );
        if now != was {
            let conns = managers(&client, &self.mc, self.size).map_err(|e| e.to_string())?;
            self.conns.store(Arc::new(conns));
            self.client.store(Arc::new(client));
            self.generation.fetch_add(1, Ordering::AcqRel);
            tracing::info!(primary = now, "fleet: the sentinels name a new Redis primary");
        }
        Ok(())
    }

    pub(super) fn set_runtime(&self, rt: tokio::runtime::Handle) {
        let _ = self.rt.set(rt);
    }

    /// The fleet thread's runtime, once it runs.
    pub fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.rt.get()
    }

    /// Whether Redis answered the last call.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// A connection (they are taken in turn).
    pub fn conn(&self) -> ConnectionManager {
        let conns = self.conns.load();
        let i = self.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        conns[i].clone()
    }

    /// This thread's own connection to Redis, for a worker's round trips: `None` on the
    /// fleet thread, outside a Tokio runtime, and while it is being made (the first call
    /// on a worker starts that, in the background; a failed attempt is retried after
    /// a second).
    pub fn own(&self) -> Option<MultiplexedConnection> {
        if ON_FLEET_THREAD.get() {
            return None;
        }
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let generation = self.generation.load(Ordering::Acquire);
        OWN.with_borrow_mut(|own| match own {
            Own::Ready(g, c) if *g == generation => Some(c.clone()),
            Own::Connecting(g) if *g == generation => None,
            Own::Failed(g, at) if *g == generation && at.elapsed() < OWN_RETRY => None,
            _ => {
                *own = Own::Connecting(generation);
                let client = self.client();
                handle.spawn(async move {
                    let cfg = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(Duration::from_secs(1)))
                        .set_response_timeout(Some(BACKGROUND_TIMEOUT));
                    let made = client.get_multiplexed_async_connection_with_config(&cfg).await;
                    OWN.with_borrow_mut(|own| {
                        if matches!(own, Own::Connecting(g) if *g == generation) {
                            *own = match made {
                                Ok(c) => Own::Ready(generation, c),
                                Err(_) => Own::Failed(generation, Instant::now()),
                            };
                        }
                    });
                });
                None
            }
        })
    }

    /// Runs `call` on a connection, waiting at most `limit`: `None` (and Redis marked down)
    /// if it failed or was late.
    pub async fn call<T, F, Fut>(&self, limit: Duration, call: F) -> Option<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.call_on(self.conn(), limit, call).await
    }

    /// [`Link::call`] on `conn`.
    pub async fn call_on<C, T, F, Fut>(&self, conn: C, limit: Duration, call: F) -> Option<T>
    where
        C: ConnectionLike,
        F: FnOnce(C) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(limit, call(conn)).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.failed(&e);
                None
            }
            Err(_) => {
                self.late(limit);
                None
            }
        }
    }

    /// A request waited `limit` for an answer that did not come: counted, and the third in a
    /// row marks Redis down.
    pub fn late(&self, limit: Duration) {
        if self.late.fetch_add(1, Ordering::Relaxed) + 1 >= LATE_IN_A_ROW {
            self.down(&format!("{LATE_IN_A_ROW} requests in a row without an answer within {limit:?}"));
        } else if let Some(f) = super::get() {
            f.count_error();
        }
    }

    /// A call failed with `e`. A connection that dropped (Redis closed an idle one after
    /// its `timeout`, `CLIENT KILL`, a restart) says little about Redis: the worker's own
    /// connection is made anew on its next use, and a ping decides ([`Link::suspect`]).
    /// Any other error (an error reply, a reply that is not Redis's) marks Redis down.
    fn failed(&self, e: &redis::RedisError) {
        if !e.is_connection_dropped() {
            self.down(&format!("{e}"));
            return;
        }
        if !ON_FLEET_THREAD.get() {
            OWN.with_borrow_mut(|own| *own = Own::None);
        }
        self.suspect(self.timeout);
    }

    /// A request's answer came later than `limit`, or not within it, which may have been
    /// its worker's doing, or a connection dropped: the fleet thread pings Redis with the
    /// same budget, and that counts, late or on time (one such ping at a time). A ping whose
    /// connection dropped too is sent again on a fresh connection: Redis is down only if
    /// that fails.
    pub fn suspect(&self, limit: Duration) {
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(rt) = self.rt.get() else {
            self.checking.store(false, Ordering::Release);
            return;
        };
        rt.spawn(async move {
            let Some(f) = super::get() else { return };
            let link = &f.link;
            let mut c = link.conn();
            match tokio::time::timeout(limit, redis::cmd("PING").query_async::<String>(&mut c)).await {
                Ok(Ok(_)) => link.on_time(),
                Err(_) => link.late(limit),
                Ok(Err(e)) if e.is_connection_dropped() => {
                    let client = link.client();
                    let fresh = tokio::time::timeout(BACKGROUND_TIMEOUT, async {
                        let mut c = client.get_multiplexed_async_connection().await?;
                        redis::cmd("PING").query_async::<String>(&mut c).await
                    })
                    .await;
                    match fresh {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => link.down(&format!("{e}")),
                        Err(_) => link.down("no answer to a ping on a fresh connection"),
                    }
                }
                Ok(Err(e)) => link.down(&format!("{e}")),
            }
            link.checking.store(false, Ordering::Release);
        });
    }

    /// A request had its answer in time.
    pub fn on_time(&self) {
        if self.late.load(Ordering::Relaxed) != 0 {
            self.late.store(0, Ordering::Relaxed);
        }
    }

    /// Marks Redis down (once) and starts the probe that marks it up again.
    fn down(&self, why: &str) {
        if let Some(f) = super::get() {
            f.count_error();
        }
        self.late.store(0, Ordering::Relaxed);
        if !self.up.swap(false, Ordering::AcqRel) {
            return;
        }
        let hold = {
            let mut cb = self.came_back.lock().unwrap_or_else(|p| p.into_inner());
            let flapped = cb.0.is_some_and(|t| t.elapsed() < STABLE);
            cb.1 = if flapped { (cb.1 * 2).min(MAX_HOLD) } else { Duration::from_secs(1) };
            cb.1
        };
        tracing::warn!(why, ?hold, "fleet: Redis failed; fleet limits are decided locally until it answers again");
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(rt) = self.rt.get() {
            rt.spawn(probe(hold));
        }
    }

    /// A fresh connection answered: new connection managers (the old ones may be stuck on
    /// a reply they could not parse), and Redis up.
    fn came_back(&self) {
        let client = self.client.load_full();
        if let Ok(conns) = managers(&client, &self.mc, self.size) {
            self.conns.store(Arc::new(conns));
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.came_back.lock().unwrap_or_else(|p| p.into_inner()).0 = Some(std::time::Instant::now());
        self.late.store(0, Ordering::Relaxed);
        self.probing.store(false, Ordering::Release);
        self.up.store(true, Ordering::Release);
    }
}

/// How long a worker waits before it tries to make its own connection again.
const OWN_RETRY: Duration = Duration::from_secs(1);

/// A worker's own connection ([`Link::own`]), of a generation of the link's connections.
enum Own {
    None,
    Connecting(u64),
    Failed(u64, Instant),
    Ready(u64, MultiplexedConnection),
}

thread_local! {
    static OWN: RefCell<Own> = const { RefCell::new(Own::None) };
    /// Set on the fleet thread, whose round trips use the shared connections.
    static ON_FLEET_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as the fleet thread.
pub(super) fn on_fleet_thread() {
    ON_FLEET_THREAD.set(true);
}

/// `n` connection managers to `client`'s server, made on first use.
fn managers(
    client: &redis::Client,
    mc: &ConnectionManagerConfig,
    n: usize,
) -> redis::RedisResult<Vec<ConnectionManager>> {
    (0..n).map(|_| ConnectionManager::new_lazy_with_config(client.clone(), mc.clone())).collect()
}

/// The sentinels of `cfg`, asked for the primary of `sentinel_master`, which is reached with
/// the credentials and database of the `redis` URL.
fn sentinel_client(cfg: &FleetConfig, list: &[String]) -> Result<SentinelClient, String> {
    let info = cfg.redis.as_str().into_connection_info().map_err(|e| format!("[fleet] redis: {e}"))?;
    let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info.redis_settings().clone());
    let urls: Vec<String> = list.iter().map(|a| format!("redis://{a}")).collect();
    SentinelClient::build(urls, cfg.sentinel_master.clone(), Some(node), SentinelServerType::Master)
        .map_err(|e| format!("[fleet] sentinels: {e}"))
}

/// Pings Redis with backoff (100 ms doubling to 1 s) until it answers, then marks it up.
async fn probe(hold: Duration) {
    let Some(f) = super::get() else { return };
    let link = &f.link;
    tokio::time::sleep(hold).await;
    let mut wait = Duration::from_millis(100);
    loop {
        if let Err(e) = link.resolve().await {
            tracing::debug!("fleet: {e}");
        }
        let client = link.client();
        let pong = tokio::time::timeout(BACKGROUND_TIMEOUT, async {
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await;
        if matches!(pong, Ok(Ok(ref p)) if p == "PONG") {
            link.came_back();
            tracing::info!("fleet: Redis answers again; fleet limits are counted there");
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}

/// Runs `call` on the fleet thread and waits for its answer, at most `limit`, from a thread
/// that is not the fleet's (the supervisor's ACME tasks): `None` without a fleet, an answer
/// or in time.
pub fn block<T, F, Fut>(limit: Duration, call: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(ConnectionManager) -> Fut + Send + 'static,
    Fut: Future<Output = redis::RedisResult<T>> + Send + 'static,
{
    let f = super::get()?;
    let rt = f.link.runtime()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let f2 = f.clone();
    rt.spawn(async move {
        let _ = tx.send(f2.link.call(limit, call).await);
    });
    rx.recv_timeout(limit + Duration::from_millis(100)).ok().flatten()
}
