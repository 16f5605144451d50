//! Whether a member may take requests: passive marking from what requests see, and the
//! state of active checks.
//!
//! Shared by every worker thread as atomics (relaxed: a worker that sees a change one
//! request late does no harm). The request path reads two of them per candidate and
//! writes only when something goes wrong, or on the first success after a failure.
//!
//! Passive (nginx's `max_fails`/`fail_timeout`): `max_fails` failures (connect errors,
//! resets, timeouts, the statuses of `fail_status`) within `fail_timeout` mark the
//! member down for `fail_timeout`; after that it is on probation: its next request
//! decides (a success re-admits it, a failure marks it down again at once). Active: a
//! member whose checks failed `unhealthy` times in a row is down until `healthy` checks
//! in a row pass ([`Streak`]). Every change is logged.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A member's health, shared by all workers.
#[derive(Debug)]
pub struct Health {
    /// What the log calls it.
    name: String,
    /// Failures counted since `window_start`.
    fails: AtomicU32,
    /// When the first failure of the current window happened (coarse ms).
    window_start: AtomicU64,
    /// Passively down until then (coarse ms); 0: not marked. Once past, the member is on
    /// probation until a request settles it.
    down_until: AtomicU64,
    /// The last failure (coarse ms), to choose when every member is down.
    last_fail: AtomicU64,
    /// Active checks say down.
    active_down: AtomicBool,
}

/// Passive marking settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passive {
    /// Failures within `fail_timeout` that mark a member down (0: never marked).
    pub max_fails: u32,
    /// The window for counting, and how long a marked member stays down.
    pub fail_timeout: Duration,
}

impl Health {
    /// A member known as `name`, up.
    pub fn new(name: String) -> Health {
        Health {
            name,
            fails: AtomicU32::new(0),
            window_start: AtomicU64::new(0),
            down_until: AtomicU64::new(0),
            last_fail: AtomicU64::new(0),
            active_down: AtomicBool::new(false),
        }
    }

    /// The member's name in the log.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the member may take a request at `now` (coarse ms).
    #[inline]
    pub fn usable(&self, now: u64) -> bool {
        !self.active_down.load(Relaxed) && self.down_until.load(Relaxed) <= now
    }

    /// When it last failed (coarse ms; 0: never).
    pub fn last_fail(&self) -> u64 {
        self.last_fail.load(Relaxed)
    }

    /// Whether active checks hold it down.
    pub fn actively_down(&self) -> bool {
        self.active_down.load(Relaxed)
    }

    /// Whether passive marking holds it down at `now`.
    pub fn passively_down(&self, now: u64) -> bool {
        self.down_until.load(Relaxed) > now
    }

    /// A request to it failed at `now` (`why` for the log).
    pub fn failed(&self, now: u64, p: &Passive, why: &str) {
        self.last_fail.store(now.max(1), Relaxed);
        if p.max_fails == 0 {
            return;
        }
        let ft = p.fail_timeout.as_millis() as u64;
        let until = self.down_until.load(Relaxed);
        if until > now {
            return; // already down (a request that began before it was marked)
        }
        if until != 0 {
            // On probation: down again at once.
            if self.down_until.compare_exchange(until, now + ft, Relaxed, Relaxed).is_ok() {
                tracing::warn!(
                    upstream = %self.name,
                    "upstream {} failed again after its fail_timeout ({why}): down for {:?}",
                    self.name,
                    p.fail_timeout
                );
            }
            return;
        }
        let start = self.window_start.load(Relaxed);
        let n = if self.fails.load(Relaxed) == 0 || now.saturating_sub(start) >= ft {
            self.window_start.store(now, Relaxed);
            self.fails.store(1, Relaxed);
            1
        } else {
            self.fails.fetch_add(1, Relaxed) + 1
        };
        if n >= p.max_fails && self.down_until.compare_exchange(0, now + ft, Relaxed, Relaxed).is_ok() {
            self.fails.store(0, Relaxed);
            tracing::warn!(
                upstream = %self.name,
                "upstream {} marked down: {n} failures within {:?} (last: {why}); retried after {:?}",
                self.name,
                p.fail_timeout,
                p.fail_timeout
            );
        }
    }

    /// A request to it succeeded: failures are forgotten; a member on probation (or tried
    /// while every member was down) is back.
    #[inline]
    pub fn succeeded(&self) {
        if self.fails.load(Relaxed) != 0 {
            self.fails.store(0, Relaxed);
        }
        let until = self.down_until.load(Relaxed);
        if until != 0 && self.down_until.compare_exchange(until, 0, Relaxed, Relaxed).is_ok() {
            tracing::info!(upstream = %self.name, "upstream {} re-admitted: a request succeeded", self.name);
        }
    }

    /// Active checks changed their verdict (`why`: what the last check saw).
    pub fn set_active(&self, up: bool, why: &str) {
        if self.active_down.swap(!up, Relaxed) == up {
            if up {
                tracing::info!(upstream = %self.name, "upstream {} is healthy again: {why}", self.name);
            } else {
                tracing::warn!(upstream = %self.name, "upstream {} failed its health checks: {why}", self.name);
            }
        }
    }
}

/// Consecutive check results and the verdict they add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Streak {
    ok: u32,
    bad: u32,
    /// The verdict (members start healthy).
    pub healthy: bool,
}

impl Default for Streak {
    fn default() -> Self {
        Streak { ok: 0, bad: 0, healthy: true }
    }
}

impl Streak {
    /// A member whose checks start from this verdict.
    pub(crate) fn starting(healthy: bool) -> Streak {
        Streak { ok: 0, bad: 0, healthy }
    }

    /// Adds one check's result; `Some(verdict)` when the verdict changes: down after
    /// `fall` failures in a row, up after `rise` successes in a row.
    pub(crate) fn record(&mut self, ok: bool, rise: u32, fall: u32) -> Option<bool> {
        if ok {
            self.ok = self.ok.saturating_add(1);
            self.bad = 0;
        } else {
            self.bad = self.bad.saturating_add(1);
            self.ok = 0;
        }
        let verdict = if self.healthy { self.bad < fall } else { self.ok >= rise };
        (verdict != self.healthy).then(|| {
            self.healthy = verdict;
            verdict
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_window_down_probation() {
        let h = Health::new("a".into());
        let p = Passive { max_fails: 3, fail_timeout: Duration::from_secs(10) };
        h.failed(1000, &p, "refused");
        h.failed(2000, &p, "refused");
        assert!(h.usable(2000));
        // The window ran out: counting starts again.
        h.failed(12_000, &p, "refused");
        h.failed(13_000, &p, "refused");
        assert!(h.usable(13_000));
        h.failed(14_000, &p, "refused");
        assert!(!h.usable(14_000) && h.passively_down(23_999));
        assert!(h.usable(24_000), "after fail_timeout: on probation");
        h.failed(24_100, &p, "refused");
        assert!(!h.usable(24_100), "one failure on probation is enough");
        assert!(h.usable(34_100));
        h.succeeded();
        h.failed(34_200, &p, "reset");
        assert!(h.usable(34_200), "re-admitted: counting from zero");
        // A success forgets failures.
        h.failed(34_300, &p, "reset");
        h.succeeded();
        h.failed(34_400, &p, "reset");
        assert!(h.usable(34_400));
        let never = Passive { max_fails: 0, ..p };
        for t in 0..10 {
            h.failed(40_000 + t, &never, "x");
        }
        assert!(h.usable(40_010) && h.last_fail() == 40_009);
    }

    #[test]
    fn active_streaks() {
        let mut s = Streak::default();
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(true, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), Some(false));
        assert_eq!(s.record(true, 2, 3), None);
        assert_eq!(s.record(false, 2, 3), None);
        assert_eq!(s.record(true, 2, 3), None);
        assert_eq!(s.record(true, 2, 3), Some(true));
        let h = Health::new("b".into());
        h.set_active(false, "500");
        assert!(!h.usable(0) && h.actively_down());
        h.set_active(true, "200");
        assert!(h.usable(0));
    }
}
