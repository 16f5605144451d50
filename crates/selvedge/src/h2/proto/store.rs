//! Where a connection's open streams live: a slab of slots reused last-in first-out, and a
//! small map from stream id to slot.
//!
//! Streams are large (windows, body queues, the response waiting to go out) and short-lived:
//! under `h2load -m100` a connection opens and closes a hundred of them per round trip. In
//! a hash map keyed by id every new stream lands in a different, cold bucket and is moved
//! in and out whole; here a new stream reuses the slot the last closed one left (still in
//! the cache), and the map moves only 8-byte `(id, slot)` pairs.

use super::priority::IdMap;

/// Open streams by id (the subset of a map's interface the connection uses).
pub(crate) struct Store<V> {
    slots: Vec<Option<(u32, V)>>,
    /// Empty slots, the most recently freed last.
    free: Vec<u32>,
    index: IdMap<u32>,
}

impl<V> Default for Store<V> {
    fn default() -> Self {
        Store { slots: Vec::new(), free: Vec::new(), index: IdMap::default() }
    }
}

impl<V> Store<V> {
    /// Number of streams.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    #[inline]
    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.index.contains_key(id)
    }

    #[inline]
    pub(crate) fn get(&self, id: &u32) -> Option<&V> {
        let slot = *self.index.get(id)?;
        self.slots[slot as usize].as_ref().map(|(_, v)| v)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut V> {
        let slot = *self.index.get(id)?;
        self.slots[slot as usize].as_mut().map(|(_, v)| v)
    }

    /// Adds (or replaces) the stream `id`; returns the one it replaced.
    pub(crate) fn insert(&mut self, id: u32, v: V) -> Option<V> {
        if let Some(&slot) = self.index.get(&id) {
            return self.slots[slot as usize].replace((id, v)).map(|(_, old)| old);
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some((id, v));
                s
            }
            None => {
                self.slots.push(Some((id, v)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, slot);
        None
    }

    /// Adds a new stream `id` (which must not be present) built by `make` right in its
    /// slot, and returns it.
    #[inline]
    pub(crate) fn insert_new(&mut self, id: u32, make: impl FnOnce() -> V) -> &mut V {
        debug_assert!(!self.index.contains_key(&id));
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, slot);
        let (_, v) = self.slots[slot as usize].insert((id, make()));
        v
    }

    /// Drops the stream `id` where it lies (no move); returns whether it was there.
    #[inline]
    pub(crate) fn delete(&mut self, id: &u32) -> bool {
        let Some(slot) = self.index.remove(id) else { return false };
        self.slots[slot as usize] = None;
        self.free.push(slot);
        true
    }

    /// Takes the stream `id` out; its slot is the next one reused.
    pub(crate) fn remove(&mut self, id: &u32) -> Option<V> {
        let slot = self.index.remove(id)?;
        let (_, v) = self.slots[slot as usize].take()?;
        self.free.push(slot);
        Some(v)
    }

    /// The streams, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u32, &V)> + '_ {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(id, v)| (id, v)))
    }

    /// The streams, mutably, in slot order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&u32, &mut V)> + '_ {
        self.slots.iter_mut().filter_map(|s| s.as_mut().map(|(id, v)| (&*id, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_and_reuse() {
        let mut s: Store<String> = Store::default();
        assert!(s.is_empty());
        assert_eq!(s.insert(1, "a".into()), None);
        assert_eq!(s.insert(3, "b".into()), None);
        assert_eq!(s.insert(3, "c".into()).as_deref(), Some("b"));
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(&3).map(String::as_str), Some("c"));
        s.get_mut(&1).unwrap().push('!');
        assert_eq!(s.remove(&1).as_deref(), Some("a!"));
        assert_eq!(s.remove(&1), None);
        assert!(!s.contains_key(&1));
        // The freed slot is reused: the slab does not grow.
        s.insert(5, "d".into());
        assert_eq!(s.slots.len(), 2);
        let mut ids: Vec<u32> = s.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [3, 5]);
        for (_, v) in s.iter_mut() {
            v.push('.');
        }
        assert_eq!(s.get(&5).map(String::as_str), Some("d."));
        assert_eq!(s.get(&7), None);
        *s.insert_new(7, || "e".into()) += "f";
        assert_eq!(s.get(&7).map(String::as_str), Some("ef"));
        assert!(s.delete(&7));
        assert!(!s.delete(&7));
        assert_eq!(s.insert_new(9, || "g".into()), "g");
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn many_streams_through_few_slots() {
        let mut s: Store<u64> = Store::default();
        for id in (1..20_000u32).step_by(2) {
            s.insert(id, id as u64);
            if id > 200 {
                assert_eq!(s.remove(&(id - 200)), Some((id - 200) as u64));
            }
        }
        assert_eq!(s.len(), 100);
        assert!(s.slots.len() <= 101, "slab grew to {}", s.slots.len());
    }
}
