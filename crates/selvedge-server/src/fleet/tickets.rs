//! TLS session ticket keys shared by the fleet, so a ticket one instance issued resumes a
//! session on any other.
//!
//! Time is cut into periods of `ticket_rotation`; period `n` has one key, kept in Redis as
//! `{prefix}stek:{n}` (32 random bytes, AES-256-GCM). Whichever instance first finds the
//! key of the current or the next period missing makes it (`SET … NX`, so there is only
//! ever one), and every instance reads the keys of periods `n − 1`, `n` and `n + 1` a few
//! times a period. New tickets are sealed with the current period's key; tickets of the
//! previous and next periods are opened too (a rotation, clocks a little apart). Keys
//! expire from Redis after three periods and are never written to disk by selvedge.
//!
//! Until Redis has answered once, or while it is unreachable, an instance makes its own
//! key for a period that has none: its tickets then resume on it alone.
//!
//! A ticket is `period (8 bytes, big-endian) ‖ nonce (12) ‖ sealed state ‖ tag (16)`, the
//! period as associated data.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::link::BACKGROUND_TIMEOUT;
use super::Fleet;

const KEY_LEN: usize = 32;
const HEAD: usize = 8 + NONCE_LEN;

/// The keys held now, by period.
struct KeySet {
    keys: Vec<(u64, LessSafeKey)>,
    /// The same keys' bytes.
    raw: Vec<(u64, Vec<u8>)>,
    /// Whether they came from Redis.
    shared: bool,
}

impl KeySet {
    fn of(raw: Vec<(u64, Vec<u8>)>, shared: bool) -> KeySet {
        let keys = raw.iter().filter_map(|(p, b)| key_of(b).map(|k| (*p, k))).collect();
        KeySet { keys, raw, shared }
    }

    fn get(&self, period: u64) -> Option<&LessSafeKey> {
        self.keys.iter().find(|(p, _)| *p == period).map(|(_, k)| k)
    }
}

/// The fleet's ticket keys, as rustls' ticket producer.
pub struct SharedTickets {
    period: Duration,
    keys: ArcSwap<KeySet>,
    rng: SystemRandom,
}

impl std::fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = self.keys.load();
        let periods: Vec<u64> = k.keys.iter().map(|(p, _)| *p).collect();
        f.debug_struct("SharedTickets").field("periods", &periods).field("shared", &k.shared).finish()
    }
}

fn key_of(bytes: &[u8]) -> Option<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, bytes).ok().map(LessSafeKey::new)
}

impl SharedTickets {
    /// Keys rotated every `period`; until Redis answers, one local key.
    pub fn new(period: Duration) -> SharedTickets {
        let t = SharedTickets {
            period,
            keys: ArcSwap::from_pointee(KeySet::of(Vec::new(), false)),
            rng: SystemRandom::new(),
        };
        t.ensure_local(t.period_now());
        t
    }

    /// The period of now.
    pub fn period_now(&self) -> u64 {
        super::unix_ms() / (self.period.as_millis().max(1) as u64)
    }

    /// Whether the keys held came from Redis.
    pub fn shared(&self) -> bool {
        self.keys.load().shared
    }

    /// Makes a local key for `period` if none is held (the neighbours held stay).
    fn ensure_local(&self, period: u64) {
        let now = self.keys.load();
        if now.get(period).is_some() {
            return;
        }
        let mut bytes = [0u8; KEY_LEN];
        if self.rng.fill(&mut bytes).is_err() {
            return;
        }
        let mut raw: Vec<(u64, Vec<u8>)> = now.raw.iter().filter(|(p, _)| p.abs_diff(period) <= 1).cloned().collect();
        raw.push((period, bytes.to_vec()));
        self.keys.store(Arc::new(KeySet::of(raw, false)));
    }

    /// Replaces the keys with those read from Redis, by period.
    fn set_shared(&self, read: Vec<(u64, Vec<u8>)>) {
        let read: Vec<(u64, Vec<u8>)> = read.into_iter().filter(|(_, b)| b.len() == KEY_LEN).collect();
        if !read.is_empty() {
            self.keys.store(Arc::new(KeySet::of(read, true)));
        }
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let set = self.keys.load();
        let now = self.period_now();
        // The current period's key; before the keys are read again after a rotation, the
        // newest held.
        let (period, key) = match set.get(now) {
            Some(k) => (now, k),
            None => set.keys.iter().max_by_key(|(p, _)| *p).map(|(p, k)| (*p, k))?,
        };
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(HEAD + plain.len() + AES_256_GCM.tag_len());
        out.extend_from_slice(&period.to_be_bytes());
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(period.to_be_bytes()), &mut body)
            .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < HEAD + AES_256_GCM.tag_len() {
            return None;
        }
        let period = u64::from_be_bytes(ticket[..8].try_into().ok()?);
        let set = self.keys.load();
        let key = set.get(period)?;
        let nonce = Nonce::try_assume_unique_for_key(&ticket[8..HEAD]).ok()?;
        let mut body = ticket[HEAD..].to_vec();
        let plain = key.open_in_place(nonce, Aad::from(period.to_be_bytes()), &mut body).ok()?;
        let n = plain.len();
        body.truncate(n);
        Some(body)
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.period.as_secs()).unwrap_or(u32::MAX).max(1)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.open(cipher)
    }
}

/// Keeps the keys: makes the current and next periods' keys in Redis if missing, reads the
/// previous, current and next, a tenth of a period apart (100 ms to 10 s).
pub(super) async fn keep(f: Arc<Fleet>) {
    let t = f.tickets.clone();
    let every = (t.period / 10).clamp(Duration::from_millis(100), Duration::from_secs(10));
    let ttl = u64::try_from((t.period * 3 + Duration::from_secs(60)).as_millis()).unwrap_or(u64::MAX);
    let name = |p: u64| super::key(&f.cfg.prefix, &format!("stek:{p}"));
    let mut warned = false;
    loop {
        let now = t.period_now();
        let mut fresh = [[0u8; KEY_LEN]; 2];
        let made = fresh.iter_mut().all(|b| t.rng.fill(b).is_ok());
        let periods = [now.saturating_sub(1), now, now + 1];
        let read = if made {
            f.link
                .call(BACKGROUND_TIMEOUT, |mut c| {
                    let mut p = redis::pipe();
                    for (i, b) in fresh.iter().enumerate() {
                        p.cmd("SET").arg(name(now + i as u64)).arg(&b[..]).arg("NX").arg("PX").arg(ttl).ignore();
                    }
                    p.cmd("MGET").arg(periods.map(name).to_vec());
                    async move { p.query_async::<(Vec<Option<Vec<u8>>>,)>(&mut c).await }
                })
                .await
        } else {
            None
        };
        match read {
            Some((vals,)) => {
                let got: Vec<(u64, Vec<u8>)> = periods
                    .iter()
                    .zip(vals)
                    .filter_map(|(p, v)| v.filter(|v| v.len() == KEY_LEN).map(|v| (*p, v)))
                    .collect();
                t.set_shared(got);
                warned = false;
            }
            None => {
                if !warned {
                    tracing::warn!("fleet: ticket keys not read from Redis; new tickets resume on this instance only");
                    warned = true;
                }
                t.ensure_local(now);
            }
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    #[test]
    fn a_ticket_opens_where_the_key_is_shared_and_nowhere_else() {
        let a = SharedTickets::new(Duration::from_secs(3600));
        let b = SharedTickets::new(Duration::from_secs(3600));
        let t = a.encrypt(b"session state").unwrap();
        assert_eq!(a.decrypt(&t).as_deref(), Some(&b"session state"[..]));
        assert_eq!(b.decrypt(&t), None, "local keys differ");
        let now = a.period_now();
        let shared = vec![(now - 1, vec![1u8; 32]), (now, vec![2u8; 32]), (now + 1, vec![3u8; 32])];
        a.set_shared(shared.clone());
        b.set_shared(shared);
        let t = a.encrypt(b"state").unwrap();
        assert_eq!(b.decrypt(&t).as_deref(), Some(&b"state"[..]));
        // Tampered: the tag fails.
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(b.decrypt(&bad), None);
        // The period is authenticated: moved to the next key, it does not open.
        let mut moved = t.clone();
        moved[..8].copy_from_slice(&(now + 1).to_be_bytes());
        assert_eq!(b.decrypt(&moved), None);
        // After a rotation the previous key still opens it; two rotations later it is gone.
        b.set_shared(vec![(now, vec![2u8; 32]), (now + 1, vec![3u8; 32]), (now + 2, vec![4u8; 32])]);
        assert!(b.decrypt(&t).is_some());
        b.set_shared(vec![(now + 1, vec![3u8; 32]), (now + 2, vec![4u8; 32]), (now + 3, vec![5u8; 32])]);
        assert!(b.decrypt(&t).is_none());
        assert!(b.decrypt(&t[..10]).is_none() && b.decrypt(&[]).is_none());
    }
}
