//! The retry budget: retries may add at most a fraction of the requests a worker sent to a
//! pool over about the last second, plus a few per second always (Finagle's and Envoy's
//! idea), so that when a pool fails as a whole retries cannot multiply its load.
//!
//! Counted per worker in two one-second buckets: the current second, and the previous
//! one weighted by how much of it still lies within the last second.

/// A worker's request and retry counts for one pool.
#[derive(Debug, Clone, Default)]
pub(crate) struct Budget {
    /// The current bucket's second (coarse ms / 1000).
    second: u64,
    requests: [u32; 2],
    retries: [u32; 2],
}

impl Budget {
    fn roll(&mut self, now_ms: u64) {
        let s = now_ms / 1000;
        if s != self.second {
            let (r, t) = if s == self.second + 1 { (self.requests[0], self.retries[0]) } else { (0, 0) };
            self.requests = [0, r];
            self.retries = [0, t];
            self.second = s;
        }
    }

    /// A request (not a retry) began at `now_ms`.
    pub(crate) fn request(&mut self, now_ms: u64) {
        self.roll(now_ms);
        self.requests[0] = self.requests[0].saturating_add(1);
    }

    /// Whether a retry may go at `now_ms` (and counts it if so): retries over about the
    /// last second stay below `ratio` of the requests plus `min_per_sec`.
    pub(crate) fn try_retry(&mut self, now_ms: u64, ratio: f64, min_per_sec: u32) -> bool {
        self.roll(now_ms);
        let left = 1.0 - (now_ms % 1000) as f64 / 1000.0;
        let requests = f64::from(self.requests[0]) + f64::from(self.requests[1]) * left;
        let retries = f64::from(self.retries[0]) + f64::from(self.retries[1]) * left;
        if retries + 1.0 > requests * ratio + f64::from(min_per_sec) {
            return false;
        }
        self.retries[0] = self.retries[0].saturating_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn a_fraction_plus_a_floor() {
        let mut b = Budget::default();
        for _ in 0..100 {
            b.request(10_000);
        }
        let allowed = (0..100).filter(|_| b.try_retry(10_000, 0.2, 3)).count();
        assert_eq!(allowed, 23);
        // Half a second on, the previous second counts for half.
        for _ in 0..100 {
            b.request(11_500);
        }
        let allowed = (0..100).filter(|_| b.try_retry(11_500, 0.2, 3)).count();
        assert_eq!(allowed, 30 + 3 - 12);
        // Much later: only the floor.
        let allowed = (0..100).filter(|_| b.try_retry(60_000, 0.2, 3)).count();
        assert_eq!(allowed, 3);
        let mut none = Budget::default();
        assert!(!none.try_retry(0, 0.0, 0));
    }
}
