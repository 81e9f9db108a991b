//! A map keyed by CUPTI correlation id that is an array where the ids are dense: the joins of
//! work records to their API and EXTERNAL_CORRELATION records (issue 34, "joins without
//! hashing per record").
//!
//! CUPTI numbers correlation ids upwards, one per API call of the process, and a launch's
//! API and EXTERNAL_CORRELATION records come before its kernel: the ids a stream learns are
//! nearly consecutive, and its kernels look them up in nearly the same order. So the ids of a
//! window `[base, base + len)` are slots of a ring ([`VecDeque`]): learning appends, looking up
//! indexes, with no hash and no probe of a table of a million entries. Ids that do not fit —
//! below the window, further than [`GAP`] past its end (another process's numbering, a hostile
//! input), or evicted when the window is mostly holes — live in a hash table, the fallback. The
//! map behaves as one `HashMap<u32, V>` whatever the order of the ids (the tests compare it
//! with one); only its speed depends on the order.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// Ids further than this past the window's end go to the table rather than growing the
/// window over the gap.
pub const GAP: u32 = 4096;

/// Holes the window may hold beyond 3 per entry before its front is evicted into the table:
/// the window's memory stays within a few times its entries'.
const SLACK: usize = 4096;

/// A map from correlation id to `V` (module docs): a window of consecutive ids as a ring of
/// slots, the rest in a hash table.
#[derive(Debug, Clone)]
pub struct CorrelationMap<V> {
    /// The id of `dense[0]`.
    base: u32,
    /// Slots of ids `base..base + dense.len()`; `None` for an id not held there.
    dense: VecDeque<Option<V>>,
    /// `Some` slots in `dense`.
    in_dense: usize,
    /// Ids outside the window when they were learned (or evicted from it).
    sparse: FxHashMap<u32, V>,
}

impl<V> Default for CorrelationMap<V> {
    fn default() -> Self {
        CorrelationMap {
            base: 0,
            dense: VecDeque::new(),
            in_dense: 0,
            sparse: FxHashMap::default(),
        }
    }
}

impl<V> CorrelationMap<V> {
    /// The slot index of `id` when it lies in the window.
    fn slot(&self, id: u32) -> Option<usize> {
        let off = id.checked_sub(self.base)? as usize;
        (off < self.dense.len()).then_some(off)
    }

    /// The value of `id`.
    pub fn get(&self, id: &u32) -> Option<&V> {
        if let Some(v) = self.slot(*id).and_then(|i| self.dense[i].as_ref()) {
            return Some(v);
        }
        if self.sparse.is_empty() {
            None
        } else {
            self.sparse.get(id)
        }
    }

    /// Whether `id` has a value.
    pub fn contains_key(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    /// Ids held.
    pub fn len(&self) -> usize {
        self.in_dense + self.sparse.len()
    }

    /// Whether no id is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `id`, `value` inserted first when it has none (`entry(id).or_insert`).
    pub fn entry_or_insert(&mut self, id: u32, value: V) -> &mut V {
        if let Some(i) = self.slot(id) {
            if self.dense[i].is_none() {
                if self.sparse.contains_key(&id) {
                    return self.sparse.entry(id).or_insert(value);
                }
                self.in_dense += 1;
            }
            return self.dense[i].get_or_insert(value);
        }
        if self.sparse.contains_key(&id) {
            return self.sparse.entry(id).or_insert(value);
        }
        if self.in_dense == 0 {
            // An empty window starts at the new id (after a wrap of the ids too).
            self.dense.clear();
            self.base = id;
        }
        let end = u64::from(self.base) + self.dense.len() as u64;
        let id64 = u64::from(id);
        if id64 < end || id64 - end > u64::from(GAP) {
            return self.sparse.entry(id).or_insert(value);
        }
        self.evict_holes();
        // `evict_holes` may move the window's base up, never past `id`'s slot.
        while u64::from(self.base) + (self.dense.len() as u64) <= id64 {
            self.dense.push_back(None);
        }
        self.in_dense += 1;
        let last = self.dense.len() - 1;
        self.dense[last].get_or_insert(value)
    }

    /// Removes `id`, giving its value.
    pub fn remove(&mut self, id: &u32) -> Option<V> {
        if let Some(v) = self.slot(*id).and_then(|i| self.dense[i].take()) {
            self.in_dense -= 1;
            self.trim();
            return Some(v);
        }
        self.sparse.remove(id)
    }

    /// Keeps only the ids for which `keep(id, value)` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&u32, &mut V) -> bool) {
        let base = self.base;
        for (i, slot) in self.dense.iter_mut().enumerate() {
            if let Some(v) = slot {
                if !keep(&base.wrapping_add(i as u32), v) {
                    *slot = None;
                    self.in_dense -= 1;
                }
            }
        }
        self.trim();
        self.sparse.retain(|id, v| keep(id, v));
    }

    /// Drops the holes at both ends of the window.
    fn trim(&mut self) {
        while matches!(self.dense.front(), Some(None)) {
            self.dense.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        while matches!(self.dense.back(), Some(None)) {
            self.dense.pop_back();
        }
    }

    /// While the window holds more than three holes per entry (and [`SLACK`]), moves its
    /// front into the table, so its memory stays proportional to what it holds.
    fn evict_holes(&mut self) {
        while self.dense.len() > SLACK + 4 * self.in_dense {
            match self.dense.pop_front() {
                Some(Some(v)) => {
                    self.in_dense -= 1;
                    self.sparse.insert(self.base, v);
                }
                Some(None) => {}
                None => break,
            }
            self.base = self.base.wrapping_add(1);
        }
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u8),
        Remove(u32),
        /// Keep ids at or above this one.
        RetainFrom(u32),
    }

    /// Ids as streams give them (a run upwards from a start), with jumps, repeats, wraps and
    /// far ids mixed in.
    fn ids() -> impl Strategy<Value = Vec<u32>> {
        let start = prop_oneof![Just(1u32), Just(u32::MAX - 50), any::<u32>()];
        let step = prop_oneof![
            8 => 0..3u32,
            1 => 0..(2 * GAP),
            1 => any::<u32>(),
        ];
        (start, prop::collection::vec(step, 0..300)).prop_map(|(s, steps)| {
            let mut id = s;
            steps
                .into_iter()
                .map(|d| {
                    id = id.wrapping_add(d);
                    id
                })
                .collect()
        })
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        (ids(), prop::collection::vec((0..10u8, any::<u8>()), 300)).prop_map(|(ids, picks)| {
            ids.iter()
                .zip(picks)
                .enumerate()
                .map(|(n, (&id, (p, v)))| match p {
                    0 => Op::Remove(ids[n / 2]),
                    1 if v < 16 => Op::RetainFrom(id.wrapping_sub(u32::from(v) * 100)),
                    _ => Op::Insert(id, v),
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every operation answers as a `HashMap`'s, and every id it held is looked up alike
        /// after each step.
        #[test]
        fn behaves_as_a_hash_map(ops in ops()) {
            let mut map = CorrelationMap::default();
            let mut model: FxHashMap<u32, u8> = FxHashMap::default();
            let mut seen = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(id, v) => {
                        seen.push(id);
                        let got = *map.entry_or_insert(id, v);
                        prop_assert_eq!(got, *model.entry(id).or_insert(v));
                        *map.entry_or_insert(id, 0) = got.wrapping_add(1);
                        *model.entry(id).or_insert(0) = got.wrapping_add(1);
                    }
                    Op::Remove(id) => prop_assert_eq!(map.remove(&id), model.remove(&id)),
                    Op::RetainFrom(from) => {
                        map.retain(|id, _| *id >= from);
                        model.retain(|id, _| *id >= from);
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                for id in &seen {
                    prop_assert_eq!(map.get(id), model.get(id), "id {}", id);
                }
                prop_assert!(map.dense.len() <= SLACK + 4 * map.in_dense + GAP as usize + 1);
            }
        }
    }

    /// An id learned far ahead lives in the table; once the window grows over it, it is still
    /// found there, and never held twice.
    #[test]
    fn the_window_grows_over_an_id_in_the_table() {
        let mut map = CorrelationMap::default();
        let far = 10 + GAP + 5;
        for id in 0..10u32 {
            map.entry_or_insert(id, 1u32);
        }
        map.entry_or_insert(far, 7);
        assert_eq!(map.sparse.len(), 1);
        for id in 10..far + 10 {
            assert_eq!(*map.entry_or_insert(id, 1), if id == far { 7 } else { 1 });
        }
        assert_eq!(map.len(), (far + 10) as usize);
        assert_eq!(map.get(&far), Some(&7));
        assert_eq!(*map.entry_or_insert(far, 1), 7, "learned twice");
        assert_eq!(map.len(), (far + 10) as usize);
        assert_eq!(map.remove(&far), Some(7));
        assert_eq!((map.get(&far), map.len()), (None, (far + 9) as usize));
    }

    /// Consecutive ids stay in the window: no hashing; a far id goes to the table.
    #[test]
    fn consecutive_ids_fill_the_window() {
        let mut map = CorrelationMap::default();
        for id in 10..10_010u32 {
            map.entry_or_insert(id, id * 2);
        }
        assert_eq!((map.in_dense, map.sparse.len()), (10_000, 0));
        map.entry_or_insert(10_010 + GAP + 1, 1);
        map.entry_or_insert(3, 1);
        assert_eq!((map.in_dense, map.sparse.len()), (10_000, 2));
        assert_eq!(map.get(&5_000), Some(&10_000));
    }
}
