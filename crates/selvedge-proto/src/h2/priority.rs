//! The output queue: which ready stream sends its next frame.
//!
//! A weighted fair queue (the seed's WFQ) on an indexed binary heap, so that enqueue,
//! dequeue and delete are all O(log n):
//!
//! - RFC 9218 urgency (0 = most urgent .. 7) is the first key: a stream of a lower urgency
//!   never waits behind a stream of a higher one.
//! - Within an urgency, each stream carries a virtual finish time. Sending `n` bytes
//!   advances it by `n * 256 / weight` (RFC 7540 §5.3.2 weights 1..=256; 16 by default),
//!   so streams of equal weight share bandwidth equally, and a stream of weight 2w gets
//!   twice the share of one of weight w.
//! - Non-incremental streams (RFC 9218 §4.2 `i` absent) of one urgency are served in stream
//!   id order, one after the other; incremental ones interleave by virtual time.
//!
//! RFC 7540 dependencies are flattened: a stream's weight is kept, its parent ignored
//! (RFC 9113 §5.3.2 deprecates the tree; weights alone already give the fairness h2 needs).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for stream ids: one multiplication (ids are bounded in number by
/// SETTINGS_MAX_CONCURRENT_STREAMS, so even chosen collisions cost little).
#[derive(Default, Clone, Copy, Debug)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by stream id.
pub type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// Default RFC 7540 weight.
pub const DEFAULT_WEIGHT: u16 = 16;
/// Default RFC 9218 urgency.
pub const DEFAULT_URGENCY: u8 = 3;

/// A stream's scheduling parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precedence {
    /// RFC 9218 urgency, 0..=7.
    pub urgency: u8,
    /// RFC 9218 incremental.
    pub incremental: bool,
    /// RFC 7540 weight, 1..=256.
    pub weight: u16,
}

impl Default for Precedence {
    fn default() -> Self {
        Precedence { urgency: DEFAULT_URGENCY, incremental: true, weight: DEFAULT_WEIGHT }
    }
}

impl Precedence {
    /// Applies an RFC 9218 `priority` field value (a structured-field dictionary such as
    /// `u=1, i`); unknown keys and invalid values are ignored (§4).
    pub fn apply_field(&mut self, value: &[u8]) {
        for item in value.split(|&b| b == b',') {
            let item = item.trim_ascii();
            let (key, val) = match item.iter().position(|&b| b == b'=') {
                Some(i) => (&item[..i], Some(item[i + 1..].trim_ascii())),
                None => (item, None),
            };
            match (key.trim_ascii(), val) {
                (b"u", Some([d @ b'0'..=b'7'])) => self.urgency = d - b'0',
                (b"i", None | Some(b"?1")) => self.incremental = true,
                (b"i", Some(b"?0")) => self.incremental = false,
                _ => {}
            }
        }
    }
}

/// A heap entry's order: urgency, then virtual time, then the tie-break (stream id for
/// non-incremental streams, arrival order otherwise), packed into one integer so that the
/// heap compares once instead of field by field: urgency in the top 3 bits, the virtual
/// time in the next 61 (saturating; 2^61 is 2^53 bytes at the smallest weight), the
/// tie-break in the low 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u128);

const VTIME_MAX: u64 = (1 << 61) - 1;

impl Key {
    #[inline]
    fn new(urgency: u8, vtime: u64, seq: u64) -> Key {
        Key(u128::from(urgency & 7) << 125 | u128::from(vtime.min(VTIME_MAX)) << 64 | u128::from(seq))
    }

    #[inline]
    fn urgency(self) -> usize {
        (self.0 >> 125) as usize
    }

    #[inline]
    fn vtime(self) -> u64 {
        (self.0 >> 64) as u64 & VTIME_MAX
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Key,
    slot: u32,
    id: u32,
}

/// Not in the heap.
const NOT_QUEUED: usize = usize::MAX;

/// Per-stream state the queue keeps while the stream lives: its heap position (so delete is
/// O(log n) without searching), finish time and parameters. Heap moves update positions
/// through the slot index, with no hashing.
#[derive(Debug, Clone, Copy)]
struct Slot {
    pos: usize,
    finish: u64,
    prec: Precedence,
}

/// The weighted fair queue of ready streams.
#[derive(Debug, Default)]
pub struct Queue {
    heap: Vec<Entry>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    ids: IdMap<u32>,
    /// Virtual time of each urgency level: the finish time of the last entry dequeued.
    level: [u64; 8],
    seq: u64,
}

impl Queue {
    /// An empty queue.
    pub fn new() -> Queue {
        Queue::default()
    }

    /// Number of queued streams.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no stream is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Number of streams the queue keeps parameters for (queued or not).
    pub fn tracked(&self) -> usize {
        self.ids.len()
    }

    /// Whether `id` is queued.
    pub fn contains(&self, id: u32) -> bool {
        self.ids.get(&id).is_some_and(|&s| self.slots[s as usize].pos != NOT_QUEUED)
    }

    fn slot(&mut self, id: u32) -> u32 {
        if let Some(&s) = self.ids.get(&id) {
            return s;
        }
        let fresh = Slot { pos: NOT_QUEUED, finish: 0, prec: Precedence::default() };
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = fresh;
                s
            }
            None => {
                self.slots.push(fresh);
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(id, s);
        s
    }

    /// Sets (or changes) a stream's parameters; a queued stream moves at once.
    pub fn set_precedence(&mut self, id: u32, prec: Precedence) {
        let s = self.slot(id) as usize;
        self.slots[s].prec = prec;
        if self.remove(id) {
            self.push(id, 0);
        }
    }

    /// The parameters of `id` (defaults if never set).
    pub fn precedence(&self, id: u32) -> Precedence {
        self.ids.get(&id).map_or_else(Precedence::default, |&s| self.slots[s as usize].prec)
    }

    /// Enqueues `id`, charging it for the `sent` bytes it sent on its last turn. Does
    /// nothing if it is already queued. O(log n).
    pub fn push(&mut self, id: u32, sent: usize) {
        let slot = self.slot(id);
        let t = &mut self.slots[slot as usize];
        if t.pos != NOT_QUEUED {
            return;
        }
        let prec = t.prec;
        let lvl = self.level[prec.urgency as usize & 7];
        let start = t.finish.max(lvl);
        t.finish = (start + (sent as u64 * 256) / prec.weight.max(1) as u64).min(VTIME_MAX);
        self.seq += 1;
        let key = if prec.incremental {
            Key::new(prec.urgency, t.finish, self.seq)
        } else {
            // Sequential: in stream id order, ahead of the level's incremental streams.
            Key::new(prec.urgency, lvl, u64::from(id))
        };
        let i = self.heap.len();
        t.pos = i;
        self.heap.push(Entry { key, slot, id });
        self.up(i);
    }

    /// Dequeues the stream to serve next. O(log n).
    pub fn pop(&mut self) -> Option<u32> {
        if self.heap.is_empty() {
            return None;
        }
        let e = self.take(0);
        let lvl = &mut self.level[e.key.urgency()];
        *lvl = (*lvl).max(e.key.vtime());
        Some(e.id)
    }

    /// Removes `id` if queued; returns whether it was. O(log n).
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(&s) = self.ids.get(&id) else { return false };
        let pos = self.slots[s as usize].pos;
        if pos == NOT_QUEUED {
            return false;
        }
        self.take(pos);
        true
    }

    /// Forgets a closed stream entirely.
    pub fn forget(&mut self, id: u32) {
        self.remove(id);
        if let Some(s) = self.ids.remove(&id) {
            self.free.push(s);
        }
    }

    /// Takes the entry at `i` out. Floyd's way: the hole it leaves sinks to a leaf along
    /// the smaller children (one comparison a level), the last entry fills it and rises to
    /// its place (usually at once: it was a leaf). A pop under h2load's hundred streams
    /// compares half as often as sifting the last entry down from the top.
    fn take(&mut self, i: usize) -> Entry {
        let last = self.heap.pop().expect("non-empty");
        let n = self.heap.len();
        if i == n {
            self.slots[last.slot as usize].pos = NOT_QUEUED;
            return last;
        }
        let e = self.heap[i];
        self.slots[e.slot as usize].pos = NOT_QUEUED;
        let mut h = i;
        loop {
            let l = 2 * h + 1;
            if l >= n {
                break;
            }
            let c = if l + 1 < n && self.heap[l + 1].key < self.heap[l].key { l + 1 } else { l };
            self.heap[h] = self.heap[c];
            self.slots[self.heap[h].slot as usize].pos = h;
            h = c;
        }
        self.heap[h] = last;
        self.slots[last.slot as usize].pos = h;
        self.up(h);
        e
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if self.heap[p].key <= self.heap[i].key {
                break;
            }
            self.swap(i, p);
            i = p;
        }
    }

    #[inline]
    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.slots[self.heap[a].slot as usize].pos = a;
        self.slots[self.heap[b].slot as usize].pos = b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prec(urgency: u8, incremental: bool, weight: u16) -> Precedence {
        Precedence { urgency, incremental, weight }
    }

    /// Serves `n` turns of `chunk` bytes; returns bytes sent per stream.
    fn serve(q: &mut Queue, turns: usize, chunk: usize) -> IdMap<usize> {
        let mut sent = IdMap::default();
        for _ in 0..turns {
            let id = q.pop().unwrap();
            *sent.entry(id).or_default() += chunk;
            q.push(id, chunk);
        }
        sent
    }

    #[test]
    fn equal_weights_share_equally_and_weights_proportionally() {
        let mut q = Queue::new();
        for id in [1, 3, 5] {
            q.set_precedence(id, prec(3, true, 16));
            q.push(id, 0);
        }
        let s = serve(&mut q, 300, 1000);
        assert_eq!((s[&1], s[&3], s[&5]), (100_000, 100_000, 100_000));
        let mut q = Queue::new();
        q.set_precedence(1, prec(3, true, 64));
        q.set_precedence(3, prec(3, true, 32));
        q.push(1, 0);
        q.push(3, 0);
        let s = serve(&mut q, 300, 1000);
        assert!((s[&1] as i64 - 200_000).abs() <= 2000, "{s:?}");
    }

    #[test]
    fn urgency_first_then_sequential_by_id() {
        let mut q = Queue::new();
        q.set_precedence(7, prec(5, false, 16));
        q.set_precedence(5, prec(5, false, 16));
        q.set_precedence(9, prec(1, true, 16));
        for id in [7, 5, 9] {
            q.push(id, 0);
        }
        assert_eq!(q.pop(), Some(9));
        q.push(9, 16_384);
        assert_eq!(q.pop(), Some(9));
        assert_eq!(q.pop(), Some(5));
        q.push(5, 16_384);
        assert_eq!(q.pop(), Some(5));
        assert_eq!(q.pop(), Some(7));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn delete_anywhere_keeps_heap_order() {
        let mut q = Queue::new();
        for id in 1..200u32 {
            q.set_precedence(id, prec((id % 8) as u8, true, (id % 256) as u16 + 1));
            q.push(id, (id as usize * 7919) % 5000);
        }
        for id in (1..200u32).step_by(3) {
            assert!(q.remove(id));
            assert!(!q.remove(id));
        }
        let mut last = (0u8, 0u64);
        while let Some(id) = q.pop() {
            assert!(id % 3 != 1);
            let u = (id % 8) as u8;
            assert!(u >= last.0);
            last = (u, 0);
        }
    }

    /// Every entry is no smaller than its parent and knows its place, after any mix of
    /// pushes, pops and removals anywhere (the hole-sinking `take` included).
    #[test]
    fn heap_order_and_positions_hold_under_any_mix() {
        let check = |q: &Queue| {
            for i in 1..q.heap.len() {
                assert!(q.heap[(i - 1) / 2].key <= q.heap[i].key, "order at {i}");
            }
            for (i, e) in q.heap.iter().enumerate() {
                assert_eq!(q.slots[e.slot as usize].pos, i, "position of {}", e.id);
            }
        };
        let mut q = Queue::new();
        let mut x = 0x2545_f491_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let r = next();
            let id = (r % 300) as u32 + 1;
            match r % 5 {
                0 | 1 => {
                    q.set_precedence(id, prec((r >> 8) as u8 % 8, r & 0x100 != 0, (r >> 16) as u16 % 256 + 1));
                    q.push(id, (r >> 24) as usize % 20_000);
                }
                2 => {
                    q.pop();
                }
                3 => {
                    q.remove(id);
                }
                _ => q.forget(id),
            }
            check(&q);
        }
    }

    #[test]
    fn priority_field_values() {
        let mut p = Precedence::default();
        p.apply_field(b"u=1, i=?0, x=9");
        assert_eq!((p.urgency, p.incremental), (1, false));
        p.apply_field(b"u=9,i");
        assert_eq!((p.urgency, p.incremental), (1, true));
    }
}
