//! What one instance does that every other must do too: cache purges and configuration API
//! changes, published on the channel `{prefix}events` and made by each subscriber as if
//! asked locally (a change arrives as the request that made it, applied to the receiver's
//! own document, so each instance keeps its own `${VAR}`s and redacted secrets).
//!
//! Pub/sub delivers to the instances subscribed at that moment: one that is restarting or
//! cut off from Redis misses the event (a restarted instance reads its configuration file,
//! and its cache starts empty).

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt as _;
use serde_json::{json, Value};

use super::link::BACKGROUND_TIMEOUT;
use super::{key, Fleet};

/// The largest event taken (a whole configuration, as the API takes it, and some).
const MAX_EVENT: usize = 5 << 20;

/// What a received configuration change is given to: the instance that sent it, the
/// change (as the admin API describes it), the digest of the configuration it was made on.
pub type ConfigHandler = Box<dyn Fn(&str, &Value, Option<String>) + Send + Sync>;

/// What ACME is told of: a certificate another instance stored, or a challenge answer it
/// published (`Some`) or withdrew.
#[derive(Debug)]
pub enum AcmeEvent<'a> {
    /// A certificate was stored.
    Stored,
    /// A challenge answer (`kind` `http01` or `tls_alpn01`).
    Challenge {
        /// `http01` or `tls_alpn01`.
        kind: &'a str,
        /// The token or the host name.
        name: &'a str,
        /// The answer, `None` when withdrawn.
        answer: Option<&'a str>,
    },
}

/// What ACME events are given to.
pub type AcmeHandler = Box<dyn Fn(AcmeEvent<'_>) + Send + Sync>;

static ON_CONFIG: OnceLock<ConfigHandler> = OnceLock::new();
static ON_ACME: OnceLock<AcmeHandler> = OnceLock::new();

/// Sets where received configuration changes go (the supervisor, through the admin API's
/// channel); without it they are logged and dropped.
pub fn on_config(h: ConfigHandler) {
    let _ = ON_CONFIG.set(h);
}

/// Sets where ACME events go.
pub fn on_acme(h: AcmeHandler) {
    let _ = ON_ACME.set(h);
}

/// `who` of a change that came from another instance.
pub const FROM_FLEET: &str = "fleet instance ";

/// Publishes `event` from this instance (in the background; it is lost if Redis does not
/// take it).
fn publish(mut event: Value) {
    let Some(f) = super::get() else { return };
    let Some(rt) = f.link.runtime() else { return };
    event["from"] = json!(f.cfg.instance);
    let f = f.clone();
    rt.spawn(async move {
        let channel = key(&f.cfg.prefix, "events");
        let text = event.to_string();
        let sent = f
            .link
            .call(BACKGROUND_TIMEOUT, |mut c| async move {
                redis::cmd("PUBLISH").arg(channel).arg(text).query_async::<u64>(&mut c).await
            })
            .await;
        if sent.is_none() {
            tracing::warn!(kind = event["kind"].as_str().unwrap_or(""), "fleet: an event did not reach Redis");
        }
    });
}

/// Tells the other instances of a cache purge made here.
pub fn purged(zone: Option<&str>, key: Option<&[u8]>, prefix: Option<&[u8]>) {
    let b64 = |v: Option<&[u8]>| v.map(|v| base64::engine::general_purpose::STANDARD.encode(v));
    publish(json!({ "kind": "purge", "zone": zone, "key": b64(key), "prefix": b64(prefix) }));
}

/// Tells the other instances that this one stored ACME certificate `id`.
pub fn acme_cert(id: &str) {
    publish(json!({ "kind": "acme-cert", "id": id }));
}

/// Tells the other instances of a challenge answer published here (`answer`) or withdrawn.
pub fn acme_challenge(kind: &str, name: &str, answer: Option<&str>) {
    publish(json!({ "kind": "acme-challenge", "type": kind, "name": name, "answer": answer }));
}

/// Tells the other instances of a configuration change made here through the API, if the
/// fleet shares them; `change` as the admin API describes it, `base` the digest of the configuration
/// it was made on. A change at a path (or to a pool) is made elsewhere only on a
/// configuration with the same tag (an instance whose configuration differs refuses it
/// rather than change another route); a whole configuration is made anywhere.
pub fn changed(change: Value, base: Option<String>) {
    if super::get().is_some_and(|f| f.cfg.share_config) {
        let whole = matches!(change["op"].as_str(), Some("load_toml" | "load_json"));
        let base = if whole { None } else { base };
        publish(json!({ "kind": "config", "change": change, "base": base }));
    }
}

/// Makes an event from another instance here.
fn made_here(f: &Fleet, payload: &[u8]) {
    if payload.len() > MAX_EVENT {
        return;
    }
    let Ok(ev) = serde_json::from_slice::<Value>(payload) else { return };
    let from = ev["from"].as_str().unwrap_or_default();
    if from == f.cfg.instance {
        return;
    }
    f.stats.events_received.fetch_add(1, Ordering::Relaxed);
    match ev["kind"].as_str() {
        Some("purge") => {
            let b = |k: &str| ev[k].as_str().and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
            let (zone, k, p) = (ev["zone"].as_str(), b("key"), b("prefix"));
            // As the API takes them: a key or a prefix, neither empty.
            if (k.is_none() && p.is_none())
                || k.as_ref().is_some_and(Vec::is_empty)
                || p.as_ref().is_some_and(Vec::is_empty)
            {
                return;
            }
            let n = crate::cache::purge(zone, k.as_deref(), p.as_deref());
            tracing::info!(from, zone = zone.unwrap_or("*"), purged = n, "cache purge from the fleet");
        }
        Some("acme-cert") => {
            tracing::debug!(from, id = ev["id"].as_str().unwrap_or(""), "an ACME certificate stored by the fleet");
            if let Some(h) = ON_ACME.get() {
                h(AcmeEvent::Stored);
            }
        }
        Some("acme-challenge") => {
            let (Some(kind), Some(name)) = (ev["type"].as_str(), ev["name"].as_str()) else { return };
            if let Some(h) = ON_ACME.get() {
                h(AcmeEvent::Challenge { kind, name, answer: ev["answer"].as_str() });
            }
        }
        Some("config") if f.cfg.share_config => match ON_CONFIG.get() {
            Some(h) => h(from, &ev["change"], ev["base"].as_str().map(str::to_string)),
            None => tracing::warn!(from, "fleet: a configuration change was not made here: no admin listener"),
        },
        _ => {}
    }
}

/// Subscribes to the events and makes them, reconnecting with backoff, until the process
/// ends.
pub(super) async fn listen(f: Arc<Fleet>) {
    let channel = key(&f.cfg.prefix, "events");
    let mut wait = Duration::from_millis(100);
    loop {
        let sub = tokio::time::timeout(BACKGROUND_TIMEOUT, async {
            let mut ps = f.link.client().get_async_pubsub().await?;
            ps.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(ps)
        })
        .await;
        match sub {
            Ok(Ok(mut ps)) => {
                wait = Duration::from_millis(100);
                let mut messages = ps.on_message();
                while let Some(m) = messages.next().await {
                    made_here(&f, m.get_payload_bytes());
                }
                tracing::warn!("fleet: the event subscription ended; subscribing again");
            }
            Ok(Err(e)) => tracing::debug!("fleet: subscribing to events: {e}"),
            Err(_) => tracing::debug!("fleet: subscribing to events: no answer"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}
