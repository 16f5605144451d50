//! The four ways to choose a member of a pool, as plain functions over a worker's own
//! counters (no clock, no socket, no shared state: the caller says which members are
//! usable).
//!
//! - **Round robin, weighted**: nginx's smooth weighted round-robin. Each pick adds every
//!   usable member's weight to its running score, takes the highest score and subtracts
//!   the sum of the weights from it: weights 5, 1, 1 give `a a b a c a a`, never `a` five
//!   times in a row, and exactly the weights over every cycle.
//! - **Least connections**: the member with the fewest requests in flight per unit of
//!   weight (this worker's requests), as nginx compares them. The round-robin scores run
//!   over every usable member on every pick, and the least loaded member with the highest
//!   score wins: an idle pool is spread exactly by weight, and a member passed over while
//!   busy is owed its turns (up to a few rounds) once it is free again, so equally fast
//!   members keep their weights at any concurrency while a slow one gets little.
//! - **Power of two choices** (`random_two`): two members drawn at random by weight, the
//!   one with fewer requests in flight per unit of weight wins (the first drawn on a tie,
//!   so equally loaded members get their weights). Nearly as good as least connections and
//!   never herds onto one member after a change.
//! - **Consistent hash**: Maglev hashing (Eisenbud et al., NSDI 2016) with weights as in
//!   Envoy: a lookup table of `TABLE_SIZE` (65,537) entries in which each member owns a share
//!   proportional to its weight; a key picks an entry. Removing one member of N moves
//!   about its own 1/N of the keys (plus a little churn); a key whose member is unusable
//!   is hashed again (with a new seed) until it lands on a usable one, so the other
//!   members' keys never move while one is down.

use std::cmp::Ordering;

/// How a pool chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Smooth weighted round robin (the default).
    RoundRobin,
    /// Fewest requests in flight per unit of weight.
    LeastConn,
    /// The better of two random members.
    RandomTwo,
    /// Consistent hashing of the request's key.
    Hash,
}

impl Policy {
    /// The policy named in the configuration.
    pub fn parse(s: &str) -> Option<Policy> {
        Some(match s {
            "round_robin" => Policy::RoundRobin,
            "least_conn" => Policy::LeastConn,
            "random_two" => Policy::RandomTwo,
            "hash" => Policy::Hash,
            _ => return None,
        })
    }
}

/// A worker's counters for one pool: smooth round-robin scores, requests in flight, and
/// its random state. Indexes are member positions.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    score: Vec<i64>,
    pub(crate) inflight: Vec<u32>,
    rng: u64,
}

impl Counters {
    pub(crate) fn new(n: usize, seed: u64) -> Counters {
        Counters { score: vec![0; n], inflight: vec![0; n], rng: seed | 1 }
    }

    /// xorshift64*: fast, and good enough to pick members.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Smooth weighted round robin over the members `take` admits.
    pub(crate) fn round_robin(&mut self, weights: &[u32], mut take: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut best: Option<usize> = None;
        let mut total = 0i64;
        for (i, &w) in weights.iter().enumerate() {
            if !take(i) {
                continue;
            }
            let w = i64::from(w);
            self.score[i] += w;
            total += w;
            if best.is_none_or(|b| self.score[i] > self.score[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.score[b] -= total;
        Some(b)
    }

    /// Least requests in flight per unit of weight; among the least loaded, the highest
    /// round-robin score, after every usable member's score moved on by its weight. A
    /// member passed over while busy keeps at most [`OWED_ROUNDS`] rounds (of the sum of
    /// the weights) of score, so a slow member does not save up a burst.
    pub(crate) fn least_conn(&mut self, weights: &[u32], usable: impl Fn(usize) -> bool) -> Option<usize> {
        let mut best: Option<usize> = None;
        let mut total = 0i64;
        for (i, &w) in weights.iter().enumerate() {
            if !usable(i) {
                continue;
            }
            self.score[i] += i64::from(w);
            total += i64::from(w);
            let better =
                best.is_none_or(|b| match cmp_load((self.inflight[i], weights[i]), (self.inflight[b], weights[b])) {
                    Ordering::Less => true,
                    Ordering::Equal => self.score[i] > self.score[b],
                    Ordering::Greater => false,
                });
            if better {
                best = Some(i);
            }
        }
        let b = best?;
        self.score[b] -= total;
        // What a busy member is owed beyond one round goes back to the member that took
        // its turns, so the scores still sum to zero and stay bounded.
        let (cap, mut excess) = (OWED_ROUNDS * total, 0);
        for (i, s) in self.score.iter_mut().enumerate() {
            if usable(i) && *s > cap {
                excess += *s - cap;
                *s = cap;
            }
        }
        self.score[b] += excess;
        Some(b)
    }

    /// The less loaded of two members drawn by weight (distinct when two are usable).
    pub(crate) fn random_two(&mut self, weights: &[u32], usable: impl Fn(usize) -> bool) -> Option<usize> {
        let total: u64 = weights.iter().enumerate().filter(|&(i, _)| usable(i)).map(|(_, &w)| u64::from(w)).sum();
        if total == 0 {
            return None;
        }
        let a = self.draw(weights, &usable, total, None)?;
        let rest = total - u64::from(weights[a]);
        let Some(b) = (rest > 0).then(|| self.draw(weights, &usable, rest, Some(a))).flatten() else {
            return Some(a);
        };
        let (la, lb) = ((self.inflight[a], weights[a]), (self.inflight[b], weights[b]));
        Some(if cmp_load(lb, la).is_lt() { b } else { a })
    }

    /// A usable member other than `skip`, drawn with probability weight / `total`.
    fn draw(
        &mut self,
        weights: &[u32],
        usable: &impl Fn(usize) -> bool,
        total: u64,
        skip: Option<usize>,
    ) -> Option<usize> {
        let mut r = self.next_random() % total;
        for (i, &w) in weights.iter().enumerate() {
            if !usable(i) || Some(i) == skip {
                continue;
            }
            if r < u64::from(w) {
                return Some(i);
            }
            r -= u64::from(w);
        }
        None
    }
}

/// How many rounds of score (the sum of the weights) a member passed over while busy keeps
/// under `least_conn`.
const OWED_ROUNDS: i64 = 4;

/// Compares two members' `in_flight / weight`, given as `(in_flight, weight)`:
/// `a/wa < b/wb` exactly as `a*wb < b*wa`.
fn cmp_load((ia, wa): (u32, u32), (ib, wb): (u32, u32)) -> Ordering {
    (u64::from(ia) * u64::from(wb)).cmp(&(u64::from(ib) * u64::from(wa)))
}

/// Entries of a Maglev table: a prime well above the number of members, so each member's
/// share is within a fraction of a percent of its weight's.
pub(crate) const TABLE_SIZE: usize = 65_537;

/// A Maglev lookup table: entry -> member index.
#[derive(Debug, Clone)]
pub(crate) struct Maglev {
    table: Vec<u16>,
}

impl Maglev {
    /// The table for members named `names` (stable names: the same name gets the same
    /// preference list in every process and after every rebuild) with these weights.
    /// `None` for an empty pool or more members than an entry can index.
    pub(crate) fn build(names: &[&str], weights: &[u32]) -> Option<Maglev> {
        let n = names.len();
        if n == 0 || n > usize::from(u16::MAX) {
            return None;
        }
        let m = TABLE_SIZE as u64;
        let perm: Vec<(u64, u64)> = names
            .iter()
            .map(|s| (hash_bytes(s.as_bytes(), 0x6d61_676c) % m, hash_bytes(s.as_bytes(), 0x6576_6f79) % (m - 1) + 1))
            .collect();
        let max_w = f64::from(weights.iter().copied().max().unwrap_or(1).max(1));
        let norm: Vec<f64> = weights.iter().map(|&w| f64::from(w) / max_w).collect();
        let mut next = vec![0u64; n];
        let mut count = vec![0u64; n];
        let mut table = vec![u16::MAX; TABLE_SIZE];
        let mut filled = 0;
        let mut iteration = 0u64;
        while filled < TABLE_SIZE {
            iteration += 1;
            for i in 0..n {
                // A member takes a turn in proportion to its weight (Envoy's weighted
                // Maglev): the heaviest every iteration, half as heavy every other.
                if (count[i] as f64) >= iteration as f64 * norm[i] {
                    continue;
                }
                let (offset, skip) = perm[i];
                let mut slot = ((offset + next[i] * skip) % m) as usize;
                while table[slot] != u16::MAX {
                    next[i] += 1;
                    slot = ((offset + next[i] * skip) % m) as usize;
                }
                table[slot] = i as u16;
                next[i] += 1;
                count[i] += 1;
                filled += 1;
                if filled == TABLE_SIZE {
                    break;
                }
            }
        }
        Some(Maglev { table })
    }

    /// The member for `key`, hashing again with new seeds while `usable` refuses the one
    /// found (up to 32 times, then `None`: the caller falls back).
    pub(crate) fn lookup(&self, key: u64, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let mut h = key;
        for round in 0..32u64 {
            let i = usize::from(self.table[(h % TABLE_SIZE as u64) as usize]);
            if usable(i) {
                return Some(i);
            }
            h = mix(key ^ (round + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        None
    }
}

/// FNV-1a over `data` then a 64-bit finalizer: stable across processes and releases
/// (a load balancer in front of several selvedge instances sends a key to the same
/// upstream from each of them).
pub(crate) fn hash_bytes(data: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// MurmurHash3's fmix64.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_round_robin_spreads_by_weight() {
        let mut c = Counters::new(3, 1);
        let w = [5, 1, 1];
        let seq: Vec<usize> = (0..7).map(|_| c.round_robin(&w, |_| true).unwrap()).collect();
        assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0]);
        // Unusable members are skipped, the others keep their shares.
        let seq: Vec<usize> = (0..4).map(|_| c.round_robin(&w, |i| i != 0).unwrap()).collect();
        assert_eq!(seq.iter().filter(|&&i| i == 1).count(), 2);
        assert_eq!(c.round_robin(&w, |_| false), None);
    }

    #[test]
    fn least_conn_prefers_idle_then_weights() {
        let mut c = Counters::new(3, 1);
        let w = [1, 1, 2];
        c.inflight = vec![3, 1, 2];
        // 1/1 = 2/2: a tie between 1 and 2, shared by weight.
        let picks: Vec<usize> = (0..6).map(|_| c.least_conn(&w, |_| true).unwrap()).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 2).count(), 4, "{picks:?}");
        assert!(!picks.contains(&0));
        c.inflight = vec![0, 5, 5];
        assert_eq!(c.least_conn(&w, |_| true), Some(0));
        assert_eq!(c.least_conn(&w, |i| i != 0), Some(2));
    }

    #[test]
    fn least_conn_keeps_the_weights_when_members_are_equally_fast() {
        // One or two requests in flight, each answered after two more picks, whoever
        // has it: every member equally fast. Over 6,000 picks the shares are the weights.
        let mut c = Counters::new(3, 1);
        let w = [1, 3, 2];
        let mut n = [0u32; 3];
        let mut open: std::collections::VecDeque<usize> = Default::default();
        for k in 0..6_000 {
            if open.len() == 1 + k % 2 {
                let done = open.pop_front().unwrap();
                c.inflight[done] -= 1;
            }
            let i = c.least_conn(&w, |_| true).unwrap();
            c.inflight[i] += 1;
            open.push_back(i);
            n[i] += 1;
        }
        assert_eq!(n, [1_000, 3_000, 2_000], "{n:?}");
    }

    #[test]
    fn random_two_avoids_the_busy_member() {
        let mut c = Counters::new(2, 7);
        c.inflight = vec![10, 0];
        for _ in 0..100 {
            assert_eq!(c.random_two(&[1, 1], |_| true), Some(1));
        }
        assert_eq!(c.random_two(&[1, 1], |i| i == 0), Some(0));
        let mut n = [0u32; 3];
        c.inflight = vec![0, 0, 0];
        for _ in 0..30_000 {
            n[c.random_two(&[1, 2, 1], |_| true).unwrap()] += 1;
        }
        // Equal load: the first drawn wins, so picks follow the weights.
        assert!((14_000..16_000).contains(&n[1]), "{n:?}");
    }

    #[test]
    fn maglev_shares_and_moves() {
        let names: Vec<String> = (0..5).map(|i| format!("http://up{i}:80")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let w = [1, 1, 1, 1, 4];
        let t = Maglev::build(&refs, &w).unwrap();
        let mut share = [0usize; 5];
        for &i in &t.table {
            share[usize::from(i)] += 1;
        }
        for (i, &s) in share.iter().enumerate() {
            let want = TABLE_SIZE as f64 * f64::from(w[i]) / 8.0;
            assert!((s as f64 - want).abs() < want * 0.01, "{share:?}");
        }
        // Removing member 1: keys of others stay where they were (within Maglev's churn).
        let (r2, w2) = ([refs[0], refs[2], refs[3], refs[4]], [1, 1, 1, 4]);
        let t2 = Maglev::build(&r2, &w2).unwrap();
        let map = [0usize, 2, 3, 4];
        let moved = (0..TABLE_SIZE).filter(|&e| usize::from(t.table[e]) != map[usize::from(t2.table[e])]).count();
        let own = share[1];
        assert!(moved < own + TABLE_SIZE / 20, "moved {moved}, its share {own}");
        // A down member's keys go elsewhere; nobody else's move.
        for k in 0..2000u64 {
            let key = hash_bytes(&k.to_le_bytes(), 0);
            let a = t.lookup(key, |_| true).unwrap();
            let b = t.lookup(key, |i| i != 4).unwrap();
            assert!(b != 4 && (a == 4 || a == b));
        }
        assert!(Maglev::build(&[], &[]).is_none());
    }
}
