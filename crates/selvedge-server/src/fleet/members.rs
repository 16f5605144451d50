//! Who is in the fleet: every `heartbeat` an instance puts its name in the sorted set
//! `{prefix}members` (scored by the time, in ms) and what it is in
//! `{prefix}member:{name}` (expiring after three heartbeats), and drops the names not seen
//! for three heartbeats. `GET /fleet` on the admin listener lists the live ones; a server
//! that stops takes its name out at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::link::BACKGROUND_TIMEOUT;
use super::{key, unix_ms, Fleet};

/// What an instance says about itself.
#[derive(Debug, Clone, Default)]
pub struct About {
    /// The public listeners' URLs.
    pub listeners: Vec<String>,
    /// The admin listener's URL, if any.
    pub admin: Option<String>,
}

/// Heartbeats, until the process ends.
pub(super) async fn beat(f: Arc<Fleet>) {
    let every = f.cfg.heartbeat;
    let ttl = ttl_ms(every);
    let started = unix_ms() / 1000;
    let me = f.cfg.instance.clone();
    let (set, one) = (key(&f.cfg.prefix, "members"), key(&f.cfg.prefix, &format!("member:{me}")));
    loop {
        let about = f.about();
        let info = json!({
            "instance": me,
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "started": started,
            "listeners": about.listeners,
            "admin": about.admin,
        })
        .to_string();
        let now = unix_ms();
        let live = f
            .link
            .call(BACKGROUND_TIMEOUT, |mut c| {
                let mut p = redis::pipe();
                p.cmd("ZADD").arg(&set).arg(now).arg(&me).ignore();
                p.cmd("SET").arg(&one).arg(&info).arg("PX").arg(ttl).ignore();
                p.cmd("ZREMRANGEBYSCORE").arg(&set).arg("-inf").arg(format!("({}", now.saturating_sub(ttl))).ignore();
                p.cmd("ZCARD").arg(&set);
                async move { p.query_async::<(u64,)>(&mut c).await }
            })
            .await;
        if let Some((n,)) = live {
            f.stats.members.store(n, Ordering::Relaxed);
        }
        tokio::time::sleep(every).await;
    }
}

/// Three heartbeats, in ms.
fn ttl_ms(every: Duration) -> u64 {
    u64::try_from(every.as_millis()).unwrap_or(u64::MAX / 4).saturating_mul(3)
}

/// The live instances: what each said of itself, and when it was last heard (ms since the
/// epoch), newest first.
///
/// # Errors
/// Redis did not answer.
pub async fn list(f: &Fleet) -> Result<serde_json::Value, String> {
    let set = key(&f.cfg.prefix, "members");
    let since = unix_ms().saturating_sub(ttl_ms(f.cfg.heartbeat));
    let names: Vec<(String, u64)> = f
        .link
        .call(BACKGROUND_TIMEOUT, |mut c| async move {
            redis::cmd("ZRANGE")
                .arg(&set)
                .arg("+inf")
                .arg(since)
                .arg("BYSCORE")
                .arg("REV")
                .arg("WITHSCORES")
                .query_async::<Vec<(String, u64)>>(&mut c)
                .await
        })
        .await
        .ok_or("Redis did not answer")?;
    let keys: Vec<String> = names.iter().map(|(n, _)| key(&f.cfg.prefix, &format!("member:{n}"))).collect();
    let infos: Vec<Option<String>> = if keys.is_empty() {
        Vec::new()
    } else {
        f.link
            .call(BACKGROUND_TIMEOUT, |mut c| async move {
                redis::cmd("MGET").arg(keys).query_async::<Vec<Option<String>>>(&mut c).await
            })
            .await
            .ok_or("Redis did not answer")?
    };
    let members: Vec<serde_json::Value> = names
        .into_iter()
        .zip(infos)
        .map(|((name, seen), info)| {
            // What another instance (maybe of another version) wrote: an object, or it is
            // set aside under `info`.
            let mut v = match info.and_then(|i| serde_json::from_str::<serde_json::Value>(&i).ok()) {
                Some(serde_json::Value::Object(o)) => serde_json::Value::Object(o),
                Some(other) => json!({ "instance": name, "info": other }),
                None => json!({ "instance": name }),
            };
            v["last_seen_ms"] = json!(seen);
            v["this"] = json!(name == f.cfg.instance);
            v
        })
        .collect();
    Ok(json!({ "instance": f.cfg.instance, "redis_up": f.link.is_up(), "members": members }))
}

/// Takes this instance out of the list (a clean stop), waiting at most a second.
pub fn leave() {
    let Some(f) = super::get() else { return };
    let Some(rt) = f.link.runtime() else { return };
    let (tx, rx) = std::sync::mpsc::channel();
    let f2 = f.clone();
    rt.spawn(async move {
        let me = f2.cfg.instance.clone();
        let (set, one) = (key(&f2.cfg.prefix, "members"), key(&f2.cfg.prefix, &format!("member:{me}")));
        let _ = f2
            .link
            .call(Duration::from_secs(1), |mut c| async move {
                redis::pipe().cmd("ZREM").arg(&set).arg(&me).cmd("DEL").arg(&one).query_async::<()>(&mut c).await
            })
            .await;
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(1));
}
