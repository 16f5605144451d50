//! The request body's clock, the same for HTTP/1.1 and HTTP/2, sans-IO (times are
//! milliseconds passed in).
//!
//! The clock starts when the app first waits for body bytes. Two rules give the deadline;
//! the earlier one applies:
//!
//! - **Body timeout**: `timeout` after the start of the current stretch; a read ends the
//!   stretch (and starts a new one) when the bytes since its start average at least
//!   `min_rate` bytes per second. A client at the minimum rate is never cut by it.
//! - **Rate credit**: the client starts with `grace` of credit; each byte earns
//!   `1 / min_rate` s more, and the credit never exceeds `timeout` ahead. A client far below
//!   the minimum rate runs out within seconds (at half the rate, in about `2 × grace`),
//!   long before `timeout`; one that sent well above it may pause up to `timeout`.
//!
//! `min_rate` 0 turns the rate off: any read extends the deadline by `timeout`.

/// The body phase's limits: `Settings::body_timeout`, `Settings::min_body_rate` and
/// `Settings::body_rate_grace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyRule {
    /// Milliseconds.
    pub(crate) timeout: u64,
    /// Bytes per second.
    pub(crate) min_rate: u64,
    /// Milliseconds.
    pub(crate) grace: u64,
}

/// A running body clock; see the module's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyClock {
    /// The current stretch: its start, and the bytes since.
    mark: u64,
    bytes: u64,
    /// The body timeout's deadline, and the end of the rate credit.
    limit: u64,
    credit: u64,
}

impl BodyClock {
    /// The app waits for bytes at `now`.
    pub(crate) fn start(now: u64, r: &BodyRule) -> BodyClock {
        let limit = now.saturating_add(r.timeout);
        let credit = if r.min_rate == 0 { limit } else { now.saturating_add(r.grace.min(r.timeout)) };
        BodyClock { mark: now, bytes: 0, limit, credit }
    }

    /// When the body is too late.
    #[inline]
    pub(crate) fn deadline(&self) -> u64 {
        self.limit.min(self.credit)
    }

    /// `n` body bytes arrived at `now`.
    pub(crate) fn progress(&mut self, n: u64, now: u64, r: &BodyRule) {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes.saturating_mul(1000) >= r.min_rate.saturating_mul(now.saturating_sub(self.mark)) {
            self.mark = now;
            self.bytes = 0;
            self.limit = now.saturating_add(r.timeout);
        }
        self.credit = match r.min_rate {
            0 => self.limit,
            rate => self.credit.saturating_add(n.saturating_mul(1000) / rate).min(now.saturating_add(r.timeout)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: BodyRule = BodyRule { timeout: 30_000, min_rate: 256, grace: 2_000 };

    /// When a client sending `chunk` bytes every `every` ms from the start is cut off.
    fn cut_at(chunk: u64, every: u64) -> u64 {
        let mut c = BodyClock::start(0, &RULE);
        let mut t = 0;
        loop {
            c.progress(chunk, t, &RULE);
            t += every;
            if t > c.deadline() {
                return c.deadline();
            }
            assert!(t < 1_000_000, "never cut");
        }
    }

    #[test]
    fn far_below_the_rate_is_cut_within_seconds() {
        // 100 B/s (50 bytes every 500 ms): 2 s of grace plus ~195 ms per read.
        let at = cut_at(50, 500);
        assert!((3_000..4_000).contains(&at), "{at}");
        // Half the rate: about twice the grace.
        let at = cut_at(128, 1_000);
        assert!((3_500..5_000).contains(&at), "{at}");
        // Nothing at all: the grace.
        let c = BodyClock::start(1_000, &RULE);
        assert_eq!(c.deadline(), 3_000);
    }

    #[test]
    fn at_or_above_the_rate_is_never_cut() {
        let mut c = BodyClock::start(0, &RULE);
        for t in (0..600_000).step_by(1_000) {
            assert!(c.deadline() >= t, "cut at {t}");
            c.progress(256, t, &RULE);
        }
    }

    #[test]
    fn credit_earned_allows_a_pause_up_to_the_timeout() {
        let mut c = BodyClock::start(0, &RULE);
        c.progress(64 * 1024, 100, &RULE);
        assert_eq!(c.deadline(), 30_100, "64 KiB earns more than the timeout: capped");
        c.progress(1, 25_000, &RULE);
        assert_eq!(c.deadline(), 30_100, "a trickle after a pause does not restart the timeout");
    }

    #[test]
    fn no_minimum_rate_means_any_read_extends() {
        let r = BodyRule { min_rate: 0, ..RULE };
        let mut c = BodyClock::start(0, &r);
        assert_eq!(c.deadline(), 30_000);
        c.progress(1, 20_000, &r);
        assert_eq!(c.deadline(), 50_000);
    }
}
